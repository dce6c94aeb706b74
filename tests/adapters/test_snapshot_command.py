"""``autoscaler snapshot``: a live cluster (the Kubernetes API emulator, reached through a kubeconfig
context) and its AWS region (moto) written as a snapshot that ``autoscaler plan`` and ``autoscaler
validate`` accept."""

from __future__ import annotations

import json
from pathlib import Path

import boto3
import pytest
import yaml

from autoscaler.cli import main
from autoscaler.domain.keys import MANAGED_BY_TAG
from simulator.kube_api import KubeApiServer
from tests.kube_objects import node, pod
from tests.moto_env import moto_environment

DEMO = Path(__file__).resolve().parents[2] / "clusters" / "demo.yaml"
REGION = "us-west-2"  # demo.yaml's


def _kubeconfig(tmp_path: Path, url: str) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "elsewhere",
        "clusters": [{"name": "emulator", "cluster": {"server": url}}],
        "users": [{"name": "me", "user": {"token": "t0ken"}}],
        "contexts": [{"name": "demo", "context": {"cluster": "emulator", "user": "me"}},
                     {"name": "elsewhere", "context": {"cluster": "nowhere", "user": "me"}}],
    }))
    return path


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_snapshot_of_a_live_cluster_is_planned(kube_api: KubeApiServer, monkeypatch: pytest.MonkeyPatch,
                                               tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               suffix: str) -> None:
    # Given a cluster with one node, three pending pods, a bound pod and a finished one
    st = kube_api.store
    st.create("nodes", node("n1", labels={"karpenter.sh/nodepool": "default"}))
    for i in range(3):
        st.create("pods", pod(f"web-{i}", cpu="1", owner_kind="ReplicaSet"))
    st.create("pods", pod("bound", node="n1"))
    st.create("pods", pod("done", node="n1", phase="Succeeded"))
    st.create("daemonsets", {"metadata": {"name": "agent", "namespace": "kube-system"},
                             "spec": {"template": {"spec": {"containers": [
                                 {"name": "a", "resources": {"requests": {"cpu": "50m"}}}]}}}})
    kubeconfig = _kubeconfig(tmp_path, kube_api.url)
    out = tmp_path / f"snap{suffix}"
    with moto_environment(monkeypatch, REGION):
        # ... and an instance the autoscaler launched that has not joined yet
        ec2 = boto3.client("ec2", region_name=REGION)
        image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
        ec2.run_instances(ImageId=image, InstanceType="m5.large", MinCount=1, MaxCount=1, TagSpecifications=[
            {"ResourceType": "instance", "Tags": [{"Key": MANAGED_BY_TAG, "Value": "demo"},
                                                 {"Key": "kubernetes.io/cluster/demo", "Value": "owned"}]}])
        # When a snapshot is taken through the kubeconfig's "demo" context
        code = main(["snapshot", "--cluster-file", str(DEMO), "--kubeconfig", str(kubeconfig), "--context", "demo",
                     "--output", str(out)])
    _, err = capsys.readouterr()
    # Then it holds the cluster's objects, the region's catalogue and the in-flight instance
    assert code == 0, err
    assert "wrote" in err and "4 pods (3 pending), 1 nodes" in err
    # (libyaml, the safe loader in C: the region's whole catalogue is megabytes, seconds of CPU in pure Python)
    doc = yaml.load(out.read_text(), Loader=yaml.CSafeLoader)
    assert doc["region"] == REGION
    assert sorted(p["metadata"]["name"] for p in doc["pods"]) == ["bound", "web-0", "web-1", "web-2"]
    assert [d["metadata"]["name"] for d in doc["daemonSets"]] == ["agent"]
    assert [p["metadata"]["name"] for p in doc["nodePools"]] == ["default"]
    assert len(doc["instanceTypes"]) > 100 and doc["offerings"][0].keys() == {"InstanceType", "Location"}
    assert [i["InstanceType"] for i in doc["inFlight"]] == ["m5.large"]
    # And the snapshot validates and plans: every pending pod is accounted for
    assert main(["validate", str(out)]) == 0
    capsys.readouterr()
    assert main(["plan", "--snapshot", str(out)]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["summary"]["pendingPods"] == 3
    placed = [p for ln in plan["launches"] for p in ln["pods"]] + list(plan["existing"])
    placed += [u["pod"] for u in plan["unschedulable"]]
    assert sorted(placed) == ["default/web-0", "default/web-1", "default/web-2"]


def test_an_unknown_context_is_a_clear_error(tmp_path: Path, kube_api: KubeApiServer,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["snapshot", "--cluster-file", str(DEMO), "--kubeconfig", str(_kubeconfig(tmp_path, kube_api.url)),
                 "--context", "nope", "--output", str(tmp_path / "s.yaml")])
    assert code == 1 and "kubeconfig context 'nope'" in capsys.readouterr().err
