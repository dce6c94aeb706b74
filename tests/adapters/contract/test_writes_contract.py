"""Writes as the product sends them: the node merge patches (cordon, taints, labels, annotations) with their
resourceVersion precondition, conflicts, node deletion with finalizers, pod deletion (graceful, immediate,
with a uid precondition) and Events."""

from __future__ import annotations

import pytest

from autoscaler.app.ports import ClusterError, ConflictError
from autoscaler.domain.models import ObjectRef, Taint
from tests.adapters.contract.conftest import Server, port_level
from tests.kube_objects import node, pod
from tests.waiting import wait_for

pytestmark = pytest.mark.contract
MERGE = "application/merge-patch+json"


def _node(server: Server, name: str) -> dict:  # type: ignore[type-arg]
    got = server.get(f"/api/v1/nodes/{name}")
    assert got is not None
    return got


def _taints(server: Server, name: str) -> list[tuple[str, str | None, str]]:
    """The node's taints but the condition taints (``node.kubernetes.io/*``) that the real server's
    TaintNodesByCondition admission and node lifecycle controller add and remove on their own."""
    return [(t["key"], t.get("value"), t["effect"]) for t in _node(server, name)["spec"].get("taints") or ()
            if not t["key"].startswith("node.kubernetes.io/")]


@port_level
def test_cordon_and_uncordon(server: Server, node_name: str) -> None:
    server.create("/api/v1/nodes", node(node_name))
    cluster = server.cluster()
    assert cluster.cordon(node_name) is True
    assert _node(server, node_name)["spec"]["unschedulable"] is True
    assert cluster.cordon(node_name) is False  # already cordoned: nothing sent
    assert cluster.uncordon(node_name) is True
    assert "unschedulable" not in _node(server, node_name)["spec"]


@port_level
def test_taints_added_replaced_and_removed(server: Server, node_name: str) -> None:
    server.create("/api/v1/nodes", node(node_name, taints=[{"key": "keep", "effect": "NoSchedule"}]))
    cluster = server.cluster()
    assert cluster.add_taint(node_name, Taint("karpenter.sh/disrupted", "NoSchedule")) is True
    assert cluster.add_taint(node_name, Taint("karpenter.sh/disrupted", "NoSchedule")) is False
    assert cluster.add_taint(node_name, Taint("v", "NoExecute", "1")) is True
    assert cluster.add_taint(node_name, Taint("v", "NoExecute", "2")) is True  # same key and effect: replaced
    assert _taints(server, node_name) == [
        ("keep", None, "NoSchedule"), ("karpenter.sh/disrupted", None, "NoSchedule"), ("v", "2", "NoExecute")]
    assert cluster.remove_taint(node_name, key="karpenter.sh/disrupted") is True
    assert cluster.remove_taint(node_name, key="v", effect="NoExecute") is True
    assert cluster.remove_taint(node_name, key="absent") is False
    assert cluster.remove_taint(node_name, key="keep") is True
    assert _taints(server, node_name) == []
    assert cluster.remove_taint(f"{node_name}-missing", key="keep") is False


@port_level
def test_labels_and_annotations_set_and_removed(server: Server, node_name: str) -> None:
    server.create("/api/v1/nodes", node(node_name, labels={"old": "1"}))
    cluster = server.cluster()
    cluster.label_node(node_name, {"new": "2", "old": None})
    cluster.annotate_node(node_name, {"a": "x"})
    cluster.annotate_node(node_name, {"a": None, "b": "y"})
    meta = _node(server, node_name)["metadata"]
    assert meta["labels"]["new"] == "2" and "old" not in meta["labels"]
    assert meta["annotations"] == {"b": "y"}


@port_level
def test_a_patch_with_a_stale_resource_version_is_409_conflict(server: Server, node_name: str) -> None:
    created = server.create("/api/v1/nodes", node(node_name))
    stale = created["metadata"]["resourceVersion"]
    server.must("PATCH", f"/api/v1/nodes/{node_name}", {"metadata": {"labels": {"x": "1"}}}, content_type=MERGE)
    status, body = server.request("PATCH", f"/api/v1/nodes/{node_name}",
                                  {"metadata": {"resourceVersion": stale}, "spec": {"unschedulable": True}},
                                  content_type=MERGE)
    assert status == 409 and body["reason"] == "Conflict", body
    assert body["details"]["name"] == node_name and body["details"]["kind"] == "nodes"
    # The adapter reads the node again and succeeds.
    assert server.cluster().cordon(node_name) is True


@port_level
def test_an_update_of_a_missing_node_is_404(server: Server, node_name: str) -> None:
    with pytest.raises(ClusterError) as err:
        server.cluster().cordon(node_name)
    assert err.value.status == 404
    status, body = server.request("PATCH", f"/api/v1/nodes/{node_name}", {"metadata": {"labels": {"x": "1"}}},
                                  content_type=MERGE)
    assert status == 404 and body["reason"] == "NotFound" and body["details"]["kind"] == "nodes"


@port_level
def test_node_delete_waits_for_finalizers_and_releases_ours(server: Server, node_name: str) -> None:
    raw = node(node_name)
    raw["metadata"]["finalizers"] = ["karpenter.sh/termination", "example.com/other"]
    server.create("/api/v1/nodes", raw)
    cluster = server.cluster()
    assert cluster.delete_node(node_name, release_finalizers=["karpenter.sh/termination"]) is True
    held = _node(server, node_name)
    assert held["metadata"]["deletionTimestamp"] and held["metadata"]["finalizers"] == ["example.com/other"]
    got = cluster.get_node(node_name)
    assert got is not None and got.deleting
    # No finalizer may be added to an object being deleted.
    status, body = server.request("PATCH", f"/api/v1/nodes/{node_name}",
                                  {"metadata": {"finalizers": ["example.com/other", "example.com/new"]}},
                                  content_type=MERGE)
    assert status == 422 and body["reason"] == "Invalid", body
    # Another delete changes nothing; the last finalizer's removal completes the delete.
    assert cluster.delete_node(node_name) is True
    server.must("PATCH", f"/api/v1/nodes/{node_name}", {"metadata": {"finalizers": None}}, content_type=MERGE)
    assert server.get(f"/api/v1/nodes/{node_name}") is None
    assert cluster.delete_node(node_name) is False


@port_level
def test_a_bound_pod_is_deleted_gracefully(server: Server, ns: str) -> None:
    server.create(f"/api/v1/namespaces/{ns}/pods", {**pod("p", namespace=ns, node="n1", grace=45)})
    cluster = server.cluster()
    assert cluster.delete_pod(ns, "p") is True
    held = server.get(f"/api/v1/namespaces/{ns}/pods/p")
    assert held is not None
    assert held["metadata"]["deletionTimestamp"] and held["metadata"]["deletionGracePeriodSeconds"] == 45
    got = cluster.get_pod(ns, "p")
    assert got is not None and got.deleting
    # A shorter grace period shortens it; zero removes the pod at once (what the kubelet's confirmation does).
    assert cluster.delete_pod(ns, "p", grace_seconds=10) is True
    held = server.get(f"/api/v1/namespaces/{ns}/pods/p")
    assert held is not None and held["metadata"]["deletionGracePeriodSeconds"] == 10
    server.must("DELETE", f"/api/v1/namespaces/{ns}/pods/p", {"gracePeriodSeconds": 0})
    assert server.get(f"/api/v1/namespaces/{ns}/pods/p") is None
    assert cluster.delete_pod(ns, "p") is False


@port_level
def test_unbound_and_finished_pods_are_deleted_at_once(server: Server, ns: str) -> None:
    server.create(f"/api/v1/namespaces/{ns}/pods", pod("pending", namespace=ns))
    server.create(f"/api/v1/namespaces/{ns}/pods", pod("done", namespace=ns, node="n1"))
    server.status_patch(f"/api/v1/namespaces/{ns}/pods/done", {"phase": "Succeeded"})
    cluster = server.cluster()
    assert cluster.delete_pod(ns, "pending") is True
    assert cluster.delete_pod(ns, "done") is True
    assert server.get(f"/api/v1/namespaces/{ns}/pods/pending") is None
    assert server.get(f"/api/v1/namespaces/{ns}/pods/done") is None


def test_a_delete_with_a_wrong_uid_precondition_is_409(server: Server, ns: str) -> None:
    created = server.create(f"/api/v1/namespaces/{ns}/pods", pod("p", namespace=ns))
    status, body = server.request("DELETE", f"/api/v1/namespaces/{ns}/pods/p",
                                  {"preconditions": {"uid": "00000000-0000-0000-0000-000000000000"}})
    assert status == 409 and body["reason"] == "Conflict", body
    assert "the UID in the precondition (00000000-0000-0000-0000-000000000000) does not match" in body["message"]
    server.must("DELETE", f"/api/v1/namespaces/{ns}/pods/p", {"preconditions": {"uid": created["metadata"]["uid"]}})
    assert server.get(f"/api/v1/namespaces/{ns}/pods/p") is None


@port_level
def test_events_as_sent(server: Server, ns: str, node_name: str) -> None:
    server.create("/api/v1/nodes", node(node_name))
    server.create(f"/api/v1/namespaces/{ns}/pods", pod("p", namespace=ns))
    cluster = server.cluster()
    target_pod = cluster.get_pod(ns, "p")
    target_node = cluster.get_node(node_name)
    assert target_pod is not None and target_node is not None
    assert cluster.record_event(target_pod, reason="Nominated", message="m" * 2000) is True
    assert cluster.record_event(target_node, reason="DisruptionBlocked", message="n", event_type="Warning") is True
    ref = ObjectRef(kind="NodePool", name="default", namespace=ns, uid="u-1", api_version="karpenter.sh/v1")
    assert cluster.record_event(ref, reason="Pool", message="p") is True
    events = [e for e in server.must("GET", f"/api/v1/namespaces/{ns}/events")["items"]
              if e.get("reportingComponent") == "eks-serverless-autoscaler"]
    assert sorted((e["involvedObject"]["kind"], e["reason"], e["type"]) for e in events) == [
        ("NodePool", "Pool", "Normal"), ("Pod", "Nominated", "Normal")]
    pod_event = next(e for e in events if e["reason"] == "Nominated")
    assert pod_event["involvedObject"]["uid"] == target_pod.uid and len(pod_event["message"]) == 1024
    node_events = wait_for(lambda: [e for e in server.must("GET", "/api/v1/namespaces/default/events")["items"]
                                    if e["involvedObject"]["name"] == node_name
                                    and e.get("reportingComponent") == "eks-serverless-autoscaler"],
                           what="the node's event")
    assert node_events[0]["reason"] == "DisruptionBlocked" and node_events[0]["type"] == "Warning"
    # An event whose involved object is in another namespace is refused (and reported, not raised).
    bad = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "x", "namespace": ns},
           "involvedObject": {"kind": "Pod", "name": "p", "namespace": "elsewhere"}, "reason": "R", "message": "m",
           "type": "Normal"}
    status, body = server.request("POST", f"/api/v1/namespaces/{ns}/events", bad)
    assert status == 422 and body["reason"] == "Invalid", body


@port_level
def test_issue33_item_14_a_conditional_annotation_write_takes_the_node_exactly_once(
        server: Server, node_name: str) -> None:
    """Two writers that read the node at the same resourceVersion: the first conditional annotation patch
    lands, the second is refused with 409 Conflict (the product's ConflictError) and changes nothing."""
    server.create("/api/v1/nodes", node(node_name))
    cluster = server.cluster()
    read = cluster.get_node(node_name)
    assert read is not None and read.resource_version
    cluster.annotate_node(node_name, {"taken-by": "first"}, resource_version=read.resource_version)
    with pytest.raises(ConflictError) as refused:
        cluster.annotate_node(node_name, {"taken-by": "second"}, resource_version=read.resource_version)
    assert refused.value.status == 409 and refused.value.reason == "Conflict"
    assert _node(server, node_name)["metadata"]["annotations"] == {"taken-by": "first"}
