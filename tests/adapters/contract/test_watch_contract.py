"""Watches as the product opens them: from a list's resourceVersion, with the pending-pod field selector and
the node-wake label selector, bookmarks allowed, a timeout, and 410 Gone from a resourceVersion the server
no longer has."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from autoscaler.app.ports import ClusterError
from autoscaler.domain.node_wake import NODE_WAKE_SELECTOR
from tests.adapters.contract.conftest import Server
from tests.kube_objects import node, pod

pytestmark = pytest.mark.contract


def _collect(stream: Any, out: list[dict[str, Any]], until: Callable[[list[dict[str, Any]]], bool]) -> None:
    """The stream's events into ``out`` until ``until(out)`` holds (or the watch ends at its timeout, a bound,
    never the wait): then the stream is closed, as the informer leaves a watch it is done with."""
    try:
        for event in stream:
            out.append(event)
            if until(out):
                return
    finally:
        stream.close()


def _names(events: list[dict[str, Any]], ns: str) -> list[tuple[str, str]]:
    return [(e["type"], e["object"]["metadata"]["name"]) for e in events
            if e["type"] != "BOOKMARK" and e["object"]["metadata"].get("namespace") == ns]


def test_the_pending_pod_watch_from_a_list_version(server: Server, ns: str) -> None:
    watcher = server.cluster("watcher")
    server.create(f"/api/v1/namespaces/{ns}/pods", pod("before", namespace=ns))
    items, version = watcher.list_unbound_pods(lambda item: item)
    assert "before" in {i["metadata"]["name"] for i in items if i["metadata"]["namespace"] == ns}
    events: list[dict[str, Any]] = []
    thread = threading.Thread(target=_collect, args=(
        watcher.watch_unbound_pods_raw(resource_version=version, timeout_seconds=60), events,
        lambda seen: ("ADDED", "last") in _names(seen, ns)))
    thread.start()
    server.create(f"/api/v1/namespaces/{ns}/pods", pod("after", namespace=ns))
    # Bound: it leaves the selection, which the stream reports as DELETED.
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "after", "namespace": ns},
               "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}}
    server.must("POST", f"/api/v1/namespaces/{ns}/pods/after/binding", binding)
    server.create(f"/api/v1/namespaces/{ns}/pods", pod("bound-at-once", namespace=ns, node="n1"))
    # A watch delivers in resourceVersion order: once this later pending pod is seen, the one created bound
    # would have been seen before it, had the selector let it through.
    server.create(f"/api/v1/namespaces/{ns}/pods", pod("last", namespace=ns))
    thread.join(timeout=90)
    assert not thread.is_alive()
    # In between, the real kube-scheduler may write its PodScheduled=False (MODIFIED) while no node fits.
    assert [e for e in _names(events, ns) if e[0] != "MODIFIED"] == [
        ("ADDED", "after"), ("DELETED", "after"), ("ADDED", "last")]


def test_the_node_wake_watch_with_its_label_selector(server: Server, ns: str, node_name: str) -> None:
    watch = server.cluster("watcher")
    pool, initialized = NODE_WAKE_SELECTOR.split(",")
    _, version = watch.list_parsed("/api/v1/nodes", lambda raw: raw, label_selector=NODE_WAKE_SELECTOR)
    def mine(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
        return [(e["type"], e["object"]["metadata"]["name"]) for e in events
                if e["type"] != "BOOKMARK" and e["object"]["metadata"]["name"] == node_name]

    events: list[dict[str, Any]] = []
    thread = threading.Thread(target=_collect, args=(watch.watch_raw(
        "/api/v1/nodes", resource_version=version, timeout_seconds=60, label_selector=NODE_WAKE_SELECTOR), events,
        lambda seen: ("DELETED", node_name) in mine(seen)))
    thread.start()
    server.create("/api/v1/nodes", node(node_name, labels={pool: "default"}))
    server.must("PATCH", f"/api/v1/nodes/{node_name}", {"metadata": {"labels": {initialized[1:]: "true"}}},
                content_type="application/merge-patch+json")
    thread.join(timeout=90)
    assert not thread.is_alive()
    # In between, the real node lifecycle controller may taint the new node (MODIFIED).
    assert [e for e in mine(events) if e[0] != "MODIFIED"] == [("ADDED", node_name), ("DELETED", node_name)]


def test_a_watch_ends_at_its_timeout_with_a_bookmark(server: Server, ns: str) -> None:
    """allowWatchBookmarks: while changes the watch does not select move the collection on, the server sends
    a BOOKMARK (an object with only its resourceVersion) before the watch ends at its timeoutSeconds, so the
    client resumes from there; then the stream ends normally."""
    cluster = server.cluster("watcher")
    _, version = cluster.list_parsed(f"/api/v1/namespaces/{ns}/pods", lambda raw: raw, label_selector="app=watched")
    stop = threading.Event()

    def churn() -> None:  # pods the watch does not select
        for i in range(40):
            if stop.wait(0.2):
                return
            server.create(f"/api/v1/namespaces/{ns}/pods", pod(f"other-{i}", namespace=ns, labels={"app": "other"}))
    thread = threading.Thread(target=churn)
    thread.start()
    started = time.monotonic()
    try:
        events = list(cluster.watch_raw(f"/api/v1/namespaces/{ns}/pods", resource_version=version,
                                        timeout_seconds=5, label_selector="app=watched"))
    finally:
        stop.set()
        thread.join()
    assert time.monotonic() - started < 60  # it ended by itself (generous: the machine may be busy)
    assert events and all(e["type"] == "BOOKMARK" for e in events), events
    mark = events[-1]["object"]
    assert int(mark["metadata"]["resourceVersion"]) > int(version)
    assert mark["kind"] == "Pod" and set(mark["metadata"]) == {"resourceVersion"}


# kube-apiserver's watch cache serves old resourceVersions and continue tokens for as long as it holds their
# history (a young server replays its initial state for any older version), so its 410 cannot be provoked in
# a test's seconds; the emulator answers 410 at once after a compaction (docs/development.md).
@pytest.mark.parametrize("server", ["emulator"], indirect=True)
def test_a_watch_from_a_compacted_version_is_410(server: Server, ns: str) -> None:
    cluster = server.cluster("watcher")
    server.create(f"/api/v1/namespaces/{ns}/pods", pod("pending", namespace=ns))
    server.compact()
    server.create(f"/api/v1/namespaces/{ns}/pods", pod("after", namespace=ns))
    with pytest.raises(ClusterError) as err:
        list(cluster.watch_unbound_pods_raw(resource_version="1", timeout_seconds=3))
    assert err.value.status == 410
    # watch_pending_pods lists again and yields every pending pod before watching on.
    seen: list[str] = []
    for p in cluster.watch_pending_pods(timeout_seconds=2, resource_version="1"):
        if p.namespace == ns:
            seen.append(p.name)
    assert sorted(seen) == ["after", "pending"]


def test_a_watch_with_a_malformed_version_is_refused(server: Server, ns: str) -> None:
    status, body = server.request("GET", f"/api/v1/namespaces/{ns}/pods?watch=1&resourceVersion=abc")
    assert status == 500 and body["kind"] == "Status" and 'Invalid value: "abc"' in body["message"], body
