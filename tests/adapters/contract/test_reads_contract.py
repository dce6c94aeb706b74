"""Reads as the product sends them: paginated lists (limit / continue, an expired continue), field and label
selectors, single gets, node status and conditions as parsed."""

from __future__ import annotations

import pytest

from autoscaler.adapters.kube.cluster import PENDING_FIELD_SELECTOR
from autoscaler.app.ports import ClusterError
from autoscaler.domain.node_wake import NODE_WAKE_SELECTOR
from tests.adapters.contract.conftest import Server, port_level
from tests.kube_objects import node, pod

pytestmark = pytest.mark.contract


def _pods(ns: str) -> str:
    return f"/api/v1/namespaces/{ns}/pods"


def test_list_pages_with_limit_and_continue(server: Server, ns: str) -> None:
    for i in range(7):
        server.create(_pods(ns), pod(f"p{i}", namespace=ns))
    first = server.must("GET", f"{_pods(ns)}?limit=3")
    assert [p["metadata"]["name"] for p in first["items"]] == ["p0", "p1", "p2"]
    token = first["metadata"]["continue"]
    assert token and first["metadata"]["resourceVersion"]
    second = server.must("GET", f"{_pods(ns)}?limit=3&continue={token}")
    assert [p["metadata"]["name"] for p in second["items"]] == ["p3", "p4", "p5"]
    last = server.must("GET", f"{_pods(ns)}?limit=3&continue={second['metadata']['continue']}")
    assert [p["metadata"]["name"] for p in last["items"]] == ["p6"]
    assert not last["metadata"].get("continue")
    # The product's paginated read returns every pod once, in the server's (namespace, name) order.
    assert [p.name for p in server.cluster(page_size=3).pods(namespace=ns)] == [f"p{i}" for i in range(7)]


# kube-apiserver keeps serving a continue token while its watch cache holds that snapshot (see
# test_watch_contract.py): its 410 cannot be provoked in a test's seconds.
@pytest.mark.parametrize("server", ["emulator"], indirect=True)
def test_a_continue_token_from_before_a_compaction_is_410_expired(server: Server, ns: str) -> None:
    for i in range(4):
        server.create(_pods(ns), pod(f"p{i}", namespace=ns))
    first = server.must("GET", f"{_pods(ns)}?limit=2")
    server.create(_pods(ns), pod("later", namespace=ns))
    server.compact()
    status, body = server.request("GET", f"{_pods(ns)}?limit=2&continue={first['metadata']['continue']}")
    assert status == 410, body
    assert body["reason"] == "Expired" and body["code"] == 410
    # The product starts the list again and returns every pod exactly once.
    assert sorted(p.name for p in server.cluster(page_size=2).pods(namespace=ns)) == [
        "later", "p0", "p1", "p2", "p3"]


def test_the_pending_field_selector_selects_unbound_unfinished_pods(server: Server, ns: str) -> None:
    _finished_and_waiting(server, ns)
    from urllib.parse import quote
    listed = server.must("GET", f"{_pods(ns)}?fieldSelector={quote(PENDING_FIELD_SELECTOR)}")
    assert [p["metadata"]["name"] for p in listed["items"]] == ["waiting"]


def _finished_and_waiting(server: Server, ns: str) -> None:
    server.create(_pods(ns), pod("waiting", namespace=ns))
    server.create(_pods(ns), pod("bound", namespace=ns, node="n1"))
    server.create(_pods(ns), pod("done", namespace=ns))
    server.status_patch(f"{_pods(ns)}/done", {"phase": "Succeeded"})
    server.create(_pods(ns), pod("failed", namespace=ns))
    server.status_patch(f"{_pods(ns)}/failed", {"phase": "Failed"})


@port_level
def test_pending_pods_are_the_unbound_unfinished_ones(server: Server, ns: str) -> None:
    _finished_and_waiting(server, ns)
    mine = [p.name for p in server.cluster().pending_pods() if p.namespace == ns]
    assert mine == ["waiting"]
    assert [p.name for p in server.cluster().pods(node_name="n1") if p.namespace == ns] == ["bound"]


@port_level
def test_label_selectors_as_sent(server: Server, ns: str, node_name: str) -> None:
    server.create(_pods(ns), pod("web", namespace=ns, labels={"app": "web"}))
    server.create(_pods(ns), pod("db", namespace=ns, labels={"app": "db"}))
    server.create(_pods(ns), pod("none", namespace=ns))
    cluster = server.cluster()
    assert [p.name for p in cluster.pods(namespace=ns, label_selector="app in (web,db),app!=db")] == ["web"]
    assert [p.name for p in cluster.pods(namespace=ns, label_selector="!app")] == ["none"]
    assert [p.name for p in cluster.pods(namespace=ns, label_selector="app")] == ["db", "web"]
    # The watcher's selector for our nodes waiting for initialisation.
    pool, initialized = NODE_WAKE_SELECTOR.split(",")
    server.create("/api/v1/nodes", node(node_name, labels={pool: "default"}))
    server.create("/api/v1/nodes", node(f"{node_name}-done", labels={pool: "default", initialized[1:]: "true"}))
    try:
        waiting = {n.name for n in cluster.nodes(label_selector=NODE_WAKE_SELECTOR)}
        assert node_name in waiting and f"{node_name}-done" not in waiting
    finally:
        server.request("DELETE", f"/api/v1/nodes/{node_name}-done")


def test_a_malformed_selector_is_400(server: Server, ns: str) -> None:
    status, body = server.request("GET", f"{_pods(ns)}?labelSelector=app%20in%20(web")
    assert status == 400 and body["reason"] == "BadRequest"


@port_level
def test_a_malformed_selector_is_a_cluster_error_400(server: Server, ns: str) -> None:
    with pytest.raises(ClusterError) as err:
        server.cluster().pods(namespace=ns, label_selector="app in (web")
    assert err.value.status == 400


@port_level
def test_gets_and_node_status_as_read(server: Server, ns: str, node_name: str) -> None:
    raw = node(node_name, labels={"topology.kubernetes.io/zone": "us-east-1a"}, cpu="3920m", memory="15Gi",
               taints=[{"key": "dedicated", "value": "x", "effect": "NoSchedule"}])
    raw["status"]["conditions"] = [
        {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ok",
         "lastHeartbeatTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z"}]
    created = server.create("/api/v1/nodes", raw)
    # Nodes keep the status they are created with (the kubelet registers that way).
    assert created["status"]["allocatable"]["cpu"] == "3920m"
    got = server.cluster().get_node(node_name)
    assert got is not None
    assert got.allocatable["cpu"] == 3920 and got.ready and got.zone == "us-east-1a"
    assert [(t.key, t.value, t.effect) for t in got.taints] == [("dedicated", "x", "NoSchedule")]
    assert server.cluster().get_node(f"{node_name}-missing") is None
    server.create(_pods(ns), pod("p", namespace=ns))
    got_pod = server.cluster().get_pod(ns, "p")
    assert got_pod is not None and got_pod.is_pending and got_pod.requests["cpu"] == 100
    assert server.cluster().get_pod(ns, "missing") is None


def test_pod_status_on_create_is_the_servers(server: Server, ns: str) -> None:
    # A pod's status is the server's on create (Pending), whatever the request carried.
    created = server.create(_pods(ns), pod("p", namespace=ns, phase="Running", ready=True))
    assert created["status"]["phase"] == "Pending"
    assert not any(c.get("type") == "Ready" for c in created["status"].get("conditions") or ())


def test_a_missing_namespace_is_404(server: Server, ns: str) -> None:
    status, body = server.request("POST", f"/api/v1/namespaces/{ns}-nope/pods", pod("p", namespace=f"{ns}-nope"))
    assert status == 404 and body["reason"] == "NotFound"


@port_level
def test_namespaces_with_their_labels(server: Server, ns: str) -> None:
    server.must("PATCH", f"/api/v1/namespaces/{ns}", {"metadata": {"labels": {"team": "a"}}},
                content_type="application/merge-patch+json")
    labels = server.cluster().namespaces()[ns]
    # The server labels every namespace with its own name (kubernetes.io/metadata.name).
    assert labels == {"team": "a", "kubernetes.io/metadata.name": ns}


# The emulator's later pages read the current state (docs/development.md, "Emulator differences kept").
@pytest.mark.parametrize("server", ["real"], indirect=True)
def test_continue_pages_are_one_snapshot(server: Server, ns: str) -> None:
    for name in ("a", "b", "d"):
        server.create(_pods(ns), pod(name, namespace=ns))
    first = server.must("GET", f"{_pods(ns)}?limit=2")
    server.create(_pods(ns), pod("c", namespace=ns))  # sorts into the second page
    second = server.must("GET", f"{_pods(ns)}?limit=2&continue={first['metadata']['continue']}")
    assert [p["metadata"]["name"] for p in second["items"]] == ["d"]
