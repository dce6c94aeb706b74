"""``autoscaler validate FILE...``: tells cluster files, manifests and snapshots apart by content, reports
every problem with its line, exits 1 on any error (0 with warnings only), and speaks JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autoscaler.cli import main

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "clusters" / "demo.yaml"
MANIFESTS = """\
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: default
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirments:
        - key: karpenter.k8s.aws/instance-categroy
          operator: In
          values: [c]
  limits:
    cpus: 10
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: default
spec:
  amiSelectorTerms: [{alias: windows2022@latest}]
  role: KarpenterNodeRole-demo
  subnetSelectorTerms: [{tags: {a: b}}]
  securityGroupSelectorTerms: [{tags: {a: b}}]
"""


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["validate", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_valid_files_of_every_kind_pass(capsys: pytest.CaptureFixture[str]) -> None:
    # Given the shipped cluster files and example snapshots
    examples = sorted((ROOT / "examples").glob("*.yaml"))
    files = [DEMO, ROOT / "tests" / "infra" / "clusters" / "full.yaml", *examples]
    # When they are validated together
    code, out, _ = _run(capsys, *map(str, files))
    # Then each is recognised and OK
    assert code == 0, out
    assert out.count("OK (cluster file)") == 2 and out.count("OK (snapshot)") == len(examples) >= 4


def test_manifests_report_every_problem_with_its_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Given a two-document manifest file with four mistakes (one inside a misspelt field)
    path = tmp_path / "karpenter.yaml"
    path.write_text(MANIFESTS)
    # When it is validated
    code, out, err = _run(capsys, str(path))
    # Then all four are reported, on their lines, and the exit code is 1
    assert code == 1
    lines = out.splitlines()
    assert [line.split(":")[1] for line in lines] == ["9", "10", "14", "21"], out
    assert "did you mean 'requirements'?" in lines[0]
    assert "did you mean 'karpenter.k8s.aws/instance-category'?" in lines[1]
    assert "unknown resource 'cpus'" in lines[2]
    assert "Windows nodes are not supported" in lines[3]
    assert "4 error(s), 0 warning(s) in 1 file(s)" in err


def test_json_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "karpenter.yaml"
    path.write_text(MANIFESTS)
    code, out, _ = _run(capsys, "--output", "json", str(path), str(DEMO))
    doc = json.loads(out)
    assert code == 1 and doc["errors"] == 4 and doc["warnings"] == 0
    first = doc["files"][0]
    assert (first["kind"], first["valid"]) == ("manifests", False)
    assert first["problems"][0] == {"line": 9, "object": "NodePool default", "field": "spec.template.spec.requirments",
                                    "message": "unknown field 'requirments'; did you mean 'requirements'?",
                                    "severity": "error"}
    assert doc["files"][1] == {"file": str(DEMO), "kind": "cluster file", "valid": True, "problems": []}


@pytest.mark.parametrize(("content", "code", "expected"), [
    (DEMO.read_text().replace('values: ["spot"]', 'values: ["spot"]\n            - key: node.kubernetes.io/'
                              'instance-type\n              operator: In\n              values: ["m5.superlarge"]'),
     0, "'m5.superlarge' is not an instance type in the bundled catalogue"),
    (DEMO.read_text().replace("rate(10 minutes)\n  registrationTimeout", "rate(1 minutes)\n  registrationTimeout"),
     1, ":69: provisioner.schedule: 'rate(1 minutes)': EventBridge wants a singular unit"),
    ("pods: [{metadata: {name: p}, spec: {containers: [{resources: {requests: {cpu: '-1'}}}]}}]\n", 1,
     "snapshot pods[0]: Pod p.containers[0].resources: resource 'cpu': '-1' is negative"),
    ("hello: world\n", 1, "cannot tell what this file is"),
    ("\x00binary", 1, "the file is binary"),
])
def test_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, code: int,
                    expected: str) -> None:
    # Given one file with a warning, an error, or content of no known kind
    path = tmp_path / "f.yaml"
    path.write_text(content)
    # When it is validated, then the exit code says whether it may be used
    got, out, _ = _run(capsys, str(path))
    assert got == code and expected in out, out


def test_missing_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, _ = _run(capsys, str(tmp_path / "nope.yaml"))
    assert code == 1 and "cannot read the file" in out


def test_snapshot_problems_carry_lines_and_all_are_reported(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    # Given a snapshot with a misspelt top-level key and a negative request
    path = tmp_path / "snap.yaml"
    path.write_text("region: us-east-1\nnodez: []\npods:\n  - metadata: {name: a}\n"
                    "    spec: {containers: [{resources: {requests: {cpu: '-1'}}}]}\n")
    # When validated, then both are reported on their lines
    code, out, _ = _run(capsys, str(path))
    assert code == 1
    assert out.splitlines() == [
        f"{path}:2: snapshot: nodez: unknown key; did you mean 'nodes'?",
        f"{path}:4: snapshot pods[0]: Pod a.containers[0].resources: resource 'cpu': '-1' is negative; "
        "a quantity must be >= 0"]


@pytest.mark.parametrize("target", ["synth", "deploy"])
def test_make_validates_the_cluster_file_before_cdk(target: str) -> None:
    # Given the Makefile's recipe for the target, the validation comes before any cdk command
    lines = (ROOT / "Makefile").read_text().split(f"\n{target}:", 1)[1].split("\n\n", 1)[0].splitlines()
    validate = next(i for i, line in enumerate(lines) if "autoscaler.cli validate clusters/$(CLUSTER).yaml" in line)
    cdk = next(i for i, line in enumerate(lines) if "cdk " in line)
    assert validate < cdk
