"""The lean pod and node decoders (``adapters/kube/lean.py``) keep every field the product reads.

GIVEN pods and nodes as the API server returns them (the realistic generator's Deployment, StatefulSet and
Job pods; hand-made pods using every scheduling field the parser knows; the examples' snapshots)
WHEN each page is decoded leanly and parsed
THEN the domain objects, the watcher's provisionable test and the node-wake reasons are the same as from all
of the JSON, and managedFields and the rest of the bulk are gone.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler.adapters.kube import lean
from autoscaler.domain.node_wake import wake_reasons
from autoscaler.domain.objects import node_from_dict, pod_from_dict
from autoscaler.domain.provisionable import is_provisionable, pod_key, unschedulable_since
from benchmarks._realistic import CONTROLLERS, pod_bytes, realistic_pod
from tests import kube_objects as k

ROOT = Path(__file__).resolve().parents[2]


def _selector(app: str) -> dict[str, Any]:
    return {"matchLabels": {"app": app}, "matchExpressions": [{"key": "tier", "operator": "In", "values": ["web"]}]}


def _rich_pod() -> dict[str, Any]:
    """Every field ``pod_from_dict`` and ``is_provisionable`` read, set to something that matters."""
    term = {"labelSelector": _selector("a"), "topologyKey": "topology.kubernetes.io/zone",
            "namespaces": ["other"], "namespaceSelector": {}}
    return {
        "metadata": {"name": "rich", "namespace": "team", "uid": "u-1", "resourceVersion": "42",
                     "labels": {"app": "a", "tier": "web"}, "annotations": {"karpenter.sh/do-not-disrupt": "true"},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "a-1", "uid": "o-1",
                                          "controller": True, "blockOwnerDeletion": True}],
                     "creationTimestamp": "2026-01-02T03:04:05Z", "deletionTimestamp": "2026-01-02T03:05:05Z",
                     "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]},
        "spec": {
            "nodeSelector": {"kubernetes.io/arch": "arm64"},
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}]}]},
                    "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 7, "preference": {
                        "matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In",
                                              "values": ["us-east-1a"]}]}}]},
                "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term],
                                "preferredDuringSchedulingIgnoredDuringExecution": [
                                    {"weight": 3, "podAffinityTerm": term}]},
                "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {**term, "topologyKey": "kubernetes.io/hostname"}],
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 5, "podAffinityTerm": {**term, "topologyKey": "kubernetes.io/hostname"}}]}},
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"},
                            {"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60}],
            "topologySpreadConstraints": [{"maxSkew": 2, "topologyKey": "topology.kubernetes.io/zone",
                                           "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": _selector("a"),
                                           "matchLabelKeys": ["tier"], "minDomains": 3,
                                           "nodeAffinityPolicy": "Ignore", "nodeTaintsPolicy": "Honor"}],
            "initContainers": [
                {"name": "init", "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}},
                {"name": "sidecar", "restartPolicy": "Always", "resources": {"limits": {"cpu": "100m"}}}],
            "containers": [{"name": "app", "image": "x", "env": [{"name": "A", "value": "b"}],
                            "resources": {"requests": {"cpu": "500m", "memory": "256Mi", "nvidia.com/gpu": "1"},
                                          "limits": {"memory": "512Mi"}},
                            "ports": [{"containerPort": 80, "hostPort": 8080, "protocol": "UDP", "hostIP": "10.0.0.1"},
                                      {"containerPort": 81}]}],
            "overhead": {"cpu": "50m"},
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data-rich"}},
                        {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {
                            "storageClassName": "gp3", "resources": {"requests": {"storage": "1Gi"}}}}}},
                        {"name": "tmp", "emptyDir": {}},
                        {"name": "token", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}}],
            "priority": 1000, "priorityClassName": "high", "terminationGracePeriodSeconds": 90,
            "schedulingGates": [{"name": "wait"}],
        },
        "status": {"phase": "Pending", "nominatedNodeName": "n-1", "qosClass": "Burstable",
                   "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                   "lastTransitionTime": "2026-01-02T03:04:06Z", "message": "0/3 nodes"},
                                  {"type": "Ready", "status": "True"}]},
    }


def _realistic(count: int) -> list[dict[str, Any]]:
    rng = random.Random(7)
    return [realistic_pod(i, rng, name=f"p-{i}", labels={"app": f"app-{i % 3}"},
                          resources={"requests": {"cpu": "250m", "memory": "512Mi"}},
                          controller=CONTROLLERS[i % len(CONTROLLERS)]) for i in range(count)]


def _example_objects(kind: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        if isinstance(doc, dict):
            out.extend(o for o in doc.get(kind) or () if isinstance(o, dict))
    return out


def _page(items: list[dict[str, Any]], **meta: str) -> bytes:
    return json.dumps({"kind": "List", "metadata": meta, "items": items}).encode()


def _pods() -> list[dict[str, Any]]:
    return [_rich_pod(), k.pod("plain"), k.pod("bound", node="n-1", ready=True, owner_kind="DaemonSet", grace=5),
            *_realistic(30), *_example_objects("pods")]


def test_every_pod_parses_the_same_from_the_lean_page() -> None:
    pods = _pods()
    page = lean.pod_page(_page(pods, resourceVersion="9", **{"continue": "next"}))
    assert page["metadata"] == {"resourceVersion": "9", "continue": "next"}
    assert len(page["items"]) == len(pods)
    for full, slim in zip(pods, page["items"], strict=True):
        assert pod_from_dict(slim) == pod_from_dict(full)
        assert is_provisionable(slim) == is_provisionable(full)
        assert unschedulable_since(slim) == unschedulable_since(full)


def test_the_watchers_pods_are_provisionable_the_same() -> None:
    pods = _pods()
    mirror = k.pod("static-web")
    mirror["metadata"]["annotations"] = {"kubernetes.io/config.mirror": "abc", "other": "x"}
    mirror["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    pods.append(mirror)
    page = lean.watched_pod_page(_page(pods, resourceVersion="9"))
    for full, slim in zip(pods, page["items"], strict=True):
        assert is_provisionable(slim) == is_provisionable(full)
        assert unschedulable_since(slim) == unschedulable_since(full)
        assert pod_key(slim) == pod_key(full) and slim["metadata"].get("resourceVersion") == full["metadata"].get(
            "resourceVersion")
    assert not is_provisionable(page["items"][-1]) and page["items"][-1]["metadata"]["annotations"] == {
        "kubernetes.io/config.mirror": "abc"}
    assert any(is_provisionable(p) for p in page["items"])
    assert sum(map(pod_bytes, page["items"])) < sum(map(pod_bytes, pods)) / 5


def test_the_rich_pod_keeps_what_matters() -> None:
    """A check that the equality above can fail: the rich pod's parse depends on the kept fields."""
    parsed = pod_from_dict(lean.pod(json.dumps(_rich_pod()).encode()))
    assert parsed.host_ports and parsed.volume_claims and parsed.empty_dir and parsed.scheduling_gated
    assert parsed.preferred_pod_anti_affinity and parsed.topology_spread and parsed.deleting
    assert parsed.priority == 1000 and parsed.termination_grace_seconds == 90


def test_managed_fields_and_bulk_are_dropped() -> None:
    pods = _realistic(50)
    slim = lean.pod_page(_page(pods))["items"]
    assert all("managedFields" not in p["metadata"] for p in slim)
    assert all("env" not in c and "livenessProbe" not in c for p in slim for c in p["spec"]["containers"])
    assert sum(map(pod_bytes, slim)) < sum(map(pod_bytes, pods)) / 2.5


def test_nodes_parse_the_same_and_wake_the_same() -> None:
    nodes = [k.node("a"), k.node("b", taints=[{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}],
                                  labels={"karpenter.sh/nodepool": "default"}),
             *_example_objects("nodes")]
    nodes[0]["status"]["images"] = [{"names": ["registry/x@sha256:" + "0" * 64], "sizeBytes": 1}] * 20
    nodes[0]["metadata"]["creationTimestamp"] = "2026-01-02T03:04:05Z"
    nodes[0]["status"]["conditions"].append({"type": "MemoryPressure", "status": "False",
                                             "lastTransitionTime": "2026-01-02T03:04:05Z"})
    page = lean.node_page(_page(nodes))
    for full, slim in zip(nodes, page["items"], strict=True):
        assert node_from_dict(slim) == node_from_dict(full)
        assert wake_reasons(slim) == wake_reasons(full)
    assert "images" not in page["items"][0]["status"]


def test_a_field_of_the_wrong_type_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"priority"):
        lean.pod(b'{"metadata": {"name": "x"}, "spec": {"priority": "high"}}')


@pytest.mark.parametrize(("path", "decoder"), [
    ("/api/v1/pods", lean.pod_page), ("/api/v1/namespaces/team/pods", lean.pod_page),
    ("/api/v1/nodes", lean.node_page), ("/apis/apps/v1/daemonsets", None), ("/api/v1/persistentvolumes", None)])
def test_lean_decoders_by_collection(path: str, decoder: Any) -> None:
    assert lean.decoder_for(path) is decoder
