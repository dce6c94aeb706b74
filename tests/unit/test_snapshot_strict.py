"""Snapshots get the cluster file's strictness: every error names the file, every problem is reported
at once, negative requests and unknown toleration operators are rejected, NodePools are checked at every
depth, and YAML loads through the fast C loader."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from autoscaler.adapters.snapshot_file import load_snapshot
from autoscaler.domain.errors import ConfigError
from autoscaler.source_file import _LOADER

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
