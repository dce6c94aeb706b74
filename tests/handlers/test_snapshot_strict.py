"""Snapshots get the cluster file's strictness: every error names the file, every problem is reported
at once, negative requests and unknown toleration operators are rejected, NodePools are checked at every
depth, and YAML loads through the fast C loader."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from autoscaler.adapters.snapshot_file import load_snapshot
from autoscaler.cli import main
from autoscaler.domain.errors import ConfigError
from autoscaler.source_file import _LOADER, load_fast
from autoscaler.validate import validate_file

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "inflate-spot.yaml"


def _pod(name: str, *, cpu: str = "1", tolerations: str = "[]") -> str:
    return (f"{{metadata: {{name: {name}, namespace: d}}, spec: {{tolerations: {tolerations}, "
            f"containers: [{{name: c, resources: {{requests: {{cpu: '{cpu}'}}}}}}]}}}}")


@pytest.mark.parametrize(("pods", "message"), [
    ([_pod("neg", cpu="-1")], "snapshot pods[0]: Pod d/neg.containers[0].resources: resource 'cpu': '-1' is negative"),
    ([_pod("tol", tolerations="[{key: a, operator: Exist}]")],
     "Pod d/tol: spec.tolerations[0].operator: 'Exist' is not Exists or Equal (did you mean 'Exists'?)"),
    ([_pod("tolv", tolerations="[{key: a, operator: Exists, value: b}]")],
     "spec.tolerations[0].value: operator Exists takes no value"),
])
def test_bad_pods_are_rejected_naming_the_file(tmp_path: Path, pods: list[str], message: str) -> None:
    # Given a snapshot with one bad pod
    path = tmp_path / "snap.yaml"
    path.write_text(f"pods: [{', '.join(pods)}]\n")
    # When it is loaded
    with pytest.raises(ConfigError) as exc:
        load_snapshot(path)
    # Then the error names the file and the field
    assert str(exc.value).startswith(f"{path}: snapshot pods[0]: ") and message in str(exc.value), str(exc.value)


def test_every_problem_of_a_snapshot_is_reported_at_once(tmp_path: Path) -> None:
    # Given a real example with a bad NodePool field, a negative request and a bad toleration
    data = json.loads(json.dumps(yaml.safe_load(EXAMPLE.read_text())))  # unshare the example's anchors
    data["nodePools"][0]["spec"]["template"]["spec"]["requirments"] = []
    data["pods"][0]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "-100m"
    data["pods"][1]["spec"]["tolerations"] = [{"key": "x", "operator": "Exist"}]
    path = tmp_path / "snap.yaml"
    path.write_text(yaml.safe_dump(data))
    # When it is loaded
    with pytest.raises(ConfigError) as exc:
        load_snapshot(path)
    # Then all three are listed, each naming the file
    lines = str(exc.value).splitlines()
    assert len(lines) == 3, lines
    assert all(line.startswith(f"{path}: ") for line in lines)
    assert "unknown field 'requirments'; did you mean 'requirements'?" in lines[0]


def test_a_v1alpha1_node_template_needs_no_instance_profile_for_planning(tmp_path: Path) -> None:
    # Given the Karpenter v0.2x guides' AWSNodeTemplate (no instanceProfile: it was a global setting)
    data = yaml.safe_load(EXAMPLE.read_text())
    data["nodeClasses"] = [{"apiVersion": "karpenter.k8s.aws/v1alpha1", "kind": "AWSNodeTemplate",
                            "metadata": {"name": "default"},
                            "spec": {"subnetSelector": {"karpenter.sh/discovery": "demo"},
                                     "securityGroupSelector": {"karpenter.sh/discovery": "demo"}}}]
    path = tmp_path / "snap.yaml"
    path.write_text(yaml.safe_dump(data))
    # When / Then it loads
    assert load_snapshot(path).node_classes["default"].ami_family == "AL2"


def test_binary_snapshot_is_rejected_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "snap.yaml"
    path.write_bytes(b"\x00\xff" * 1000)
    with pytest.raises(ConfigError, match=rf"^{path}: the file is binary"):
        load_snapshot(path)


def test_yaml_is_read_with_the_c_loader_when_available() -> None:
    # libyaml is what makes a 20 MB YAML snapshot load in seconds (benchmarks/snapshot_load.py)
    assert _LOADER is (yaml.CSafeLoader if yaml.__with_libyaml__ else yaml.SafeLoader)


def test_the_documented_minimal_example_plans(capsys: pytest.CaptureFixture[str]) -> None:
    # Given docs/snapshot.md's hand-written example, when it is planned
    assert main(["plan", "--snapshot", str(EXAMPLE.with_name("snapshot-minimal.yaml"))]) == 0
    plan = json.loads(capsys.readouterr().out)
    # Then the small pod fits the existing node and the big one gets the cheapest spot m5.xlarge
    assert plan["existing"] == {"default/web-1": "ip-10-0-1-10.ec2.internal"}
    assert [(ln["capacityType"], ln["instanceTypes"], ln["pods"]) for ln in plan["launches"]] == [
        ("spot", ["m5.xlarge"], ["default/batch-1"])]


@pytest.mark.parametrize("text", [
    "a: &x {b: 1, c: [1, 2]}\nd: *x\ne:\n  <<: *x\n  b: 2\n",
    "a: yes\nb: '1'\nc: 1.5\nd: ~\ne: 2024-01-01\nf: !!str 5\ng: 0x1f\nh: [null, true, .inf]\n",
    "- <<: [{a: 1}, {a: 2, b: 3}]\n  c: 4\n",
    "x: |\n  multi\n  line\ny: >\n  folded\n",
    "", "a: !!binary aGVsbG8=\n", "&a x\n", "[1, {a: b}]\n", "a: !!set {x, y}\n", "a: !!omap [x: 1]\n",
    "'<<': 1\n", "a: !!int '5'\n", "cpu: 1000\nmemory: 1000Gi\nname: '1000'\n",
])
def test_the_fast_yaml_loader_reads_what_safe_load_reads(text: str) -> None:
    # Given any YAML construct, the event-stream builder returns exactly what yaml.safe_load does
    assert load_fast(text) == yaml.safe_load(text)


def test_the_fast_yaml_loader_rejects_what_safe_load_rejects() -> None:
    for text in ("a: 1\n---\nb: 2\n", "a: [1\n", "? [1]\n: 2\n"):
        with pytest.raises(yaml.YAMLError):
            yaml.safe_load(text)
        with pytest.raises(yaml.YAMLError):
            load_fast(text)


@pytest.mark.parametrize("text", ["a: " + "[" * 50_000 + "]" * 50_000 + "\n",
                                  "a: !!set {x}\nb: " + "[" * 50_000 + "]" * 50_000 + "\n"])
def test_hostile_nesting_is_a_finding_not_a_crash(tmp_path: Path, text: str) -> None:
    # Given a file nested 50,000 deep (libyaml's composer recurses in C and would crash the process)
    path = tmp_path / "deep.yaml"
    path.write_text(text)
    # When it is validated or loaded as a snapshot, then it is refused with a message about its depth,
    # whichever layer stops it first (the product's own check, or libyaml's nesting limit since PyYAML 6.0.3)
    too_deep = r"nested more than 200 levels deep|exceeded maximum nesting depth"
    report = validate_file(path)
    assert len(report.problems) == 1
    assert re.search(too_deep, report.problems[0].message), report.problems[0].message
    with pytest.raises(ConfigError, match=rf"{too_deep}|unknown key"):
        load_snapshot(path)


def test_a_billion_laughs_is_refused_before_it_expands(tmp_path: Path) -> None:
    # Given nine levels of aliases of aliases: tiny on disk, 490 million values expanded
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    path = tmp_path / "laughs.yaml"
    path.write_text("\n".join(["clusterName: x", *lines]) + "\n")
    # When it is validated, then it is refused, quickly
    report = validate_file(path)
    assert "anchors and aliases expand this document to 490,329,066 values" in report.problems[0].message


def test_planning_a_cluster_file_says_what_to_do(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--snapshot", str(EXAMPLE.parents[1] / "clusters" / "demo.yaml")]) == 2
    assert "this is a cluster file, not a snapshot; write one of a live cluster with 'autoscaler snapshot" in (
        capsys.readouterr().err)
