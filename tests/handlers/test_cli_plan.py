"""`autoscaler plan` on the example snapshots (the cases Karpenter's guides walk through) and on bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any] | str, str]:
    code = main(["plan", *args])
    out, err = capsys.readouterr()
    try:
        return code, json.loads(out), err
    except json.JSONDecodeError:
        return code, out, err


def test_inflate_on_spot_only_nodepool(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--snapshot", str(EXAMPLES / "inflate-spot.yaml"))
    assert code == 0 and isinstance(out, dict)
    assert out["summary"]["pendingPods"] == 5 and out["unschedulable"] == []
    pods = [p for ln in out["launches"] for p in ln["pods"]]
    assert sorted(pods) == sorted(f"default/inflate-7d9c5b8f6-{i:05d}" for i in range(5))
    for ln in out["launches"]:
        assert ln["capacityType"] == "spot" and ln["nodePool"] == "default" and ln["nodeClass"] == "default"
        assert ln["labels"]["karpenter.sh/capacity-type"] == "spot"
        assert 1 <= len(ln["instanceTypes"]) <= 60
        assert all(t.split(".")[0][0] in "cmr" for t in ln["instanceTypes"])  # Karpenter's default categories
        assert ln["hourlyPrice"] > 0
    assert out["summary"]["hourlyPrice"] == pytest.approx(sum(ln["hourlyPrice"] for ln in out["launches"]))


def test_nginx_intent_apps(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--snapshot", str(EXAMPLES / "nginx-intent-apps.yaml"))
    assert code == 0 and isinstance(out, dict)
    assert sum(len(ln["pods"]) for ln in out["launches"]) == 6
    for ln in out["launches"]:
        assert ln["labels"]["intent"] == "apps" and ln["capacityType"] == "spot"
        sizes = {t.split(".")[1] for t in ln["instanceTypes"]}
        assert not sizes & {"nano", "micro", "small", "medium", "large"}


def test_weighted_nodepools_tainted_on_demand_wins_for_tolerating_pods(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--snapshot", str(EXAMPLES / "weighted-nodepools.yaml"))
    assert code == 0 and isinstance(out, dict)
    for ln in out["launches"]:
        team = all(p.startswith("default/team-a-api") for p in ln["pods"])
        web = all(p.startswith("default/web") for p in ln["pods"])
        assert team or web
        if team:
            assert ln["nodePool"] == "team-a-on-demand" and ln["capacityType"] == "on-demand"
            assert ln["taints"] == [{"key": "dedicated", "value": "team-a", "effect": "NoSchedule"}]
            assert ln["labels"]["team"] == "team-a"
        else:
            assert ln["nodePool"] == "default" and ln["capacityType"] == "spot"


def test_text_output(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--snapshot", str(EXAMPLES / "inflate-spot.yaml"), "--output", "text")
    assert code == 0 and isinstance(out, str) and "node(s) to launch" in out and "default spot" in out


@pytest.mark.parametrize(("content", "message"), [
    ("nodePools: [{kind: NodePool, metadata: {name: x}, spec: {weight: 500, template: {spec: "
     "{nodeClassRef: {name: d}}}}}]", "NodePool x: spec.weight"),
    ("pods: [{metadata: {name: p}, spec: {containers: [{resources: {requests: {cpu: lots}}}]}}]",
     "snapshot pods[0]: Pod p.containers[0].resources: not a quantity"),
    ("prices: {onDemand: {m5.large: cheap}}", "snapshot: prices.onDemand.m5.large"),
    ("bogus: 1", "snapshot: bogus: unknown key; expected one of: daemonSets, inFlight"),
    ("nodez: []\npods: {a: 1}", "snapshot: nodez: unknown key; did you mean 'nodes'?"),
    ("pods: {a: 1}", "snapshot pods: must be a list"),
    ("offerings: [{InstanceType: m5.large}]", "snapshot offerings[0]: InstanceType and Location are required"),
    ("[1, 2", "not valid YAML"),
])
def test_bad_input_exits_non_zero_naming_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   content: str, message: str) -> None:
    f = tmp_path / "snap.yaml"
    f.write_text(content)
    code, _, err = run(capsys, "--snapshot", str(f))
    assert code == 2
    assert message in err


def test_missing_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, "--snapshot", str(tmp_path / "nope.json"))
    assert code == 2 and "cannot read" in err


# Karpenter v0.2x getting-started guide's manifests, as the guide applies them: the AWSNodeTemplate names no
# instanceProfile (it came from the global aws.defaultInstanceProfile setting).
GUIDE_V1ALPHA5_PROVISIONER = {
    "apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner", "metadata": {"name": "default"},
    "spec": {"requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}],
             "limits": {"resources": {"cpu": 1000}}, "providerRef": {"name": "default"},
             "ttlSecondsAfterEmpty": 30}}
GUIDE_V1ALPHA1_AWSNODETEMPLATE = {
    "apiVersion": "karpenter.k8s.aws/v1alpha1", "kind": "AWSNodeTemplate", "metadata": {"name": "default"},
    "spec": {"subnetSelector": {"karpenter.sh/discovery": "my-cluster"},
             "securityGroupSelector": {"karpenter.sh/discovery": "my-cluster"}}}


def test_plan_accepts_the_v0_2x_guides_awsnodetemplate_without_instance_profile(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # Given the inflate snapshot with the v0.2x guide's Provisioner and AWSNodeTemplate in place of the v1 objects
    snapshot = yaml.safe_load((EXAMPLES / "inflate-spot.yaml").read_text())
    snapshot["nodePools"] = [GUIDE_V1ALPHA5_PROVISIONER]
    snapshot["nodeClasses"] = [GUIDE_V1ALPHA1_AWSNODETEMPLATE]
    path = tmp_path / "v0.2x.json"
    path.write_text(json.dumps(snapshot))
    # When planned offline
    code, out, err = run(capsys, "--snapshot", str(path), "--output", "json")
    # Then planning needs no instance profile: every pending pod gets a spot node of the converted NodePool
    assert code == 0, err
    assert isinstance(out, dict) and out["unschedulable"] == []
    assert sum(len(ln["pods"]) for ln in out["launches"]) == 5
    assert {(ln["nodePool"], ln["nodeClass"], ln["capacityType"]) for ln in out["launches"]} == {
        ("default", "default", "spot")}
