"""Scenarios on the real control plane where kube-scheduler's own rules decide whether the capacity the
provisioner launched is right: zone topology spread, pod anti-affinity (then consolidation of the node it
empties), DaemonSets (one on spot nodes only, as the Node Termination Handler is deployed), host ports and a
PersistentVolume pinned to one zone. Each asserts every pod bound by kube-scheduler and Running and no
duplicate launch."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.real_kube.conftest import RealCluster
from tests.waiting import wait_for

pytestmark = [pytest.mark.real_kube, pytest.mark.e2e]
ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"


def _settle(env: RealCluster, selector: str, count: int) -> list[dict[str, Any]]:
    pods = wait_for(lambda: env.running(selector, count), step=env.provision, timeout=150,
                    what=f"{count} pods of {selector} bound and Running")
    env.scheduled_by_kube_scheduler(pods)
    env.no_duplicate_launches()
    return list(pods)


def _zone_of(env: RealCluster, node: str) -> str:
    return str(env.plane.must("GET", f"/api/v1/nodes/{node}")["metadata"]["labels"][ZONE])


def test_zone_topology_spread(real_cluster: RealCluster) -> None:
    env = real_cluster
    env.runtime()
    env.deployment("spread", 3, cpu="500m", spec={"topologySpreadConstraints": [
        {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
         "labelSelector": {"matchLabels": {"app": "spread"}}}]})
    pods = _settle(env, "app=spread", 3)
    assert len({_zone_of(env, p["spec"]["nodeName"]) for p in pods}) == 3


def test_pod_anti_affinity_then_consolidation_of_the_emptied_node(real_cluster: RealCluster) -> None:
    env = real_cluster
    env.runtime()
    env.deployment("solo", 3, cpu="500m", spec={"affinity": {"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": HOST, "labelSelector": {"matchLabels": {"app": "solo"}}}]}}})
    pods = _settle(env, "app=solo", 3)
    assert len({p["spec"]["nodeName"] for p in pods}) == 3
    assert len(env.nodes()) == 3

    env.deployment("solo", 2)
    wait_for(lambda: env.running("app=solo", 2) and len(env.pods("app=solo")) == 2, what="one pod gone")
    busy = {p["spec"]["nodeName"] for p in env.pods("app=solo")}
    # The emptied node goes (consolidateAfter 2s); the two busy ones stay.
    wait_for(lambda: {n["metadata"]["name"] for n in env.nodes()} == busy, step=env.disrupt, timeout=120,
             what="the emptied node removed")
    assert env.running("app=solo", 2)
    assert len(env.instances()) == 2


def test_daemonsets_including_one_on_spot_nodes_only(real_cluster: RealCluster) -> None:
    env = real_cluster
    env.runtime()
    for name, selector in (("agent", None), ("nth", {"karpenter.sh/capacity-type": "spot"})):
        spec: dict[str, Any] = {"tolerations": [{"operator": "Exists"}],
                                "containers": [{"name": name, "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.7",
                                                "resources": {"requests": {"cpu": "300m", "memory": "128Mi"}}}]}
        if selector:
            spec["nodeSelector"] = selector
        env.apply(f"/apis/apps/v1/namespaces/{env.ns}/daemonsets", {
            "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": env.ns},
            "spec": {"selector": {"matchLabels": {"ds": name}},
                     "template": {"metadata": {"labels": {"ds": name}}, "spec": spec}}})
    env.deployment("app", 3)
    _settle(env, "app=app", 3)
    nodes = env.nodes()
    spot = [n for n in nodes if n["metadata"]["labels"].get("karpenter.sh/capacity-type") == "spot"]
    assert spot  # the guides' NodePool is spot only
    # Every node runs the agent and, being spot, the NTH: the app pods fit beside both DaemonSets.
    wait_for(lambda: env.running("ds=agent", len(nodes)) and env.running("ds=nth", len(spot)),
             step=env.provision, timeout=90, what="the DaemonSet pods Running on every node")
    env.no_duplicate_launches()


def test_host_ports(real_cluster: RealCluster) -> None:
    env = real_cluster
    env.runtime()
    env.deployment("port", 2, cpu="100m", spec={"containers": [{
        "name": "port", "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.7",
        "ports": [{"containerPort": 8080, "hostPort": 8080}], "resources": {"requests": {"cpu": "100m"}}}]})
    pods = _settle(env, "app=port", 2)
    assert len({p["spec"]["nodeName"] for p in pods}) == 2


def test_a_volume_pinned_to_one_zone(real_cluster: RealCluster) -> None:
    env = real_cluster
    env.runtime()
    env.apply("/apis/storage.k8s.io/v1/storageclasses", {
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": f"{env.ns}-gp3"},
        "provisioner": "ebs.csi.aws.com", "volumeBindingMode": "WaitForFirstConsumer"})
    env.apply("/api/v1/persistentvolumes", {
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"{env.ns}-pv"},
        "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"],
                 "storageClassName": f"{env.ns}-gp3", "persistentVolumeReclaimPolicy": "Retain",
                 "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-0123456789abcdef0"},
                 "claimRef": {"namespace": env.ns, "name": "data"},
                 "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                     {"key": ZONE, "operator": "In", "values": ["us-east-1b"]}]}]}}}})
    env.apply(f"/api/v1/namespaces/{env.ns}/persistentvolumeclaims", {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data", "namespace": env.ns},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": f"{env.ns}-gp3",
                 "volumeName": f"{env.ns}-pv", "resources": {"requests": {"storage": "10Gi"}}}})
    try:
        env.deployment("db", 1, spec={"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]})
        pods = _settle(env, "app=db", 1)
        assert _zone_of(env, pods[0]["spec"]["nodeName"]) == "us-east-1b"
    finally:
        env.plane.request("DELETE", f"/api/v1/persistentvolumes/{env.ns}-pv")
        env.plane.request("DELETE", f"/apis/storage.k8s.io/v1/storageclasses/{env.ns}-gp3")
