"""The simulation's in-process transport (simulator/kube_inprocess.py) answers every request shape the
handlers send exactly as the emulator does over HTTP: same status, headers that matter, and bytes.

Two emulators are seeded alike (fixed uids, a fixed clock), one reached over HTTP and one in-process, and
the same requests go to both in the same order, so their stores evolve alike and every answer can be
compared byte for byte.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import urllib3
from kubernetes.client import ApiClient

from autoscaler.adapters.kube.cluster import KubeCluster
from simulator.kube_api import KubeApiServer, client_for
from simulator.kube_inprocess import install
from simulator.kube_store import Store

Request = tuple[str, str, list[tuple[str, str]], Any, str | None]


def _pod(name: str, *, app: str, node: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "spec": spec,
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "labels": {"app": app}}}


def _seeded() -> Store:
    store = Store(graceful_deletion=True, clock=lambda: 1_800_000_000.0)
    store.create("nodes", {"metadata": {"name": "n1", "uid": "uid-n1", "labels": {"zone": "a"}}, "spec": {}})
    for i in range(5):
        store.create("pods", _pod(f"web-{i}", app="web", node="n1"))
    store.create("pods", _pod("pending-0", app="batch"))
    store.create("poddisruptionbudgets", {"metadata": {"name": "web", "namespace": "default", "uid": "uid-pdb"},
                                          "spec": {"minAvailable": 4, "selector": {"matchLabels": {"app": "web"}}}})
    for i in range(5):
        store.set_pod_ready("default", f"web-{i}")
    return store


@pytest.fixture
def clients() -> Iterator[tuple[ApiClient, ApiClient, KubeApiServer, KubeApiServer]]:
    with KubeApiServer(store=_seeded()) as over_http, KubeApiServer(store=_seeded()) as in_process:
        yield client_for(over_http.url), install(client_for(in_process.url), in_process), over_http, in_process


def _call(api: ApiClient, request: Request) -> tuple[int, str, str | None, bytes]:
    method, path, query, body, ctype = request
    headers = {"Accept": "application/json", **({"Content-Type": ctype} if ctype else {})}
    params = api.param_serialize(method=method, resource_path=path, query_params=query, header_params=headers,
                                 body=body, auth_settings=["BearerToken"])
    resp = api.call_api(*params, _request_timeout=10)
    return int(resp.status), str(resp.reason), resp.getheader("Content-Type"), resp.read()


MERGE, STRATEGIC, JSON_PATCH = ("application/merge-patch+json", "application/strategic-merge-patch+json",
                                "application/json-patch+json")
EVICTION = {"apiVersion": "policy/v1", "kind": "Eviction"}

# The handlers' request shapes, in an order where each write changes what later reads see.
REQUESTS: list[tuple[str, Request]] = [
    ("list, first page", ("GET", "/api/v1/pods", [("limit", "2")], None, None)),
    ("list, pending field selector", ("GET", "/api/v1/pods", [
        ("limit", "2000"), ("fieldSelector", "spec.nodeName=,status.phase!=Succeeded,status.phase!=Failed")],
        None, None)),
    ("list, label selector", ("GET", "/api/v1/namespaces/default/pods", [("labelSelector", "app=web")], None, None)),
    ("list nodes", ("GET", "/api/v1/nodes", [("limit", "2000")], None, None)),
    ("list PDBs (status computed)", ("GET", "/apis/policy/v1/poddisruptionbudgets", [], None, None)),
    ("get", ("GET", "/api/v1/nodes/n1", [], None, None)),
    ("get, 404", ("GET", "/api/v1/namespaces/default/pods/nope", [], None, None)),
    ("merge patch", ("PATCH", "/api/v1/nodes/n1", [], {"spec": {"unschedulable": True}}, MERGE)),
    ("strategic merge patch", ("PATCH", "/api/v1/nodes/n1", [],
                               {"spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}}, STRATEGIC)),
    ("json patch", ("PATCH", "/api/v1/nodes/n1", [],
                    [{"op": "add", "path": "/metadata/labels/x", "value": "y"}], JSON_PATCH)),
    ("eviction, allowed", ("POST", "/api/v1/namespaces/default/pods/web-0/eviction", [], {
        **EVICTION, "metadata": {"name": "web-0", "namespace": "default"}}, "application/json")),
    ("eviction, 429 by the PDB", ("POST", "/api/v1/namespaces/default/pods/web-1/eviction", [], {
        **EVICTION, "metadata": {"name": "web-1", "namespace": "default"}}, "application/json")),
    ("delete with preconditions", ("DELETE", "/api/v1/namespaces/default/pods/pending-0", [],
                                   {"gracePeriodSeconds": 0, "preconditions": {"uid": "uid-pending-0"}},
                                   "application/json")),
    ("delete, 404", ("DELETE", "/api/v1/namespaces/default/pods/pending-0", [], {}, "application/json")),
    ("create an event", ("POST", "/api/v1/namespaces/default/events", [], {
        "metadata": {"name": "e1", "namespace": "default", "uid": "uid-e1"}, "reason": "Test"},
        "application/json")),
    ("list after the writes", ("GET", "/api/v1/pods", [("limit", "2000")], None, None)),
]


def test_every_request_shape_gets_the_same_answer_in_process_as_over_http(
        clients: tuple[ApiClient, ApiClient, KubeApiServer, KubeApiServer]) -> None:
    http, local, over_http, in_process = clients
    answers = []
    for what, request in REQUESTS:
        # Given two emulators in the same state / When the same request goes to each
        want, got = _call(http, request), _call(local, request)
        # Then the status, content type and bytes are the same
        assert got == want, what
        answers.append(got[0])
    assert 429 in answers and 404 in answers and 201 in answers
    # And a paged list's continue token leads to the same second page
    token = json.loads(_call(local, REQUESTS[0][1])[3])["metadata"]["continue"]
    _call(http, REQUESTS[0][1])
    page2: Request = ("GET", "/api/v1/pods", [("limit", "2"), ("continue", token)], None, None)
    assert _call(local, page2) == _call(http, page2)
    # And both servers counted the requests alike
    assert in_process.requests() == over_http.requests()


def _watch(api: ApiClient, query: list[tuple[str, str]]) -> tuple[int, list[bytes]]:
    params = api.param_serialize(method="GET", resource_path="/api/v1/pods", query_params=query,
                                 header_params={"Accept": "application/json"}, auth_settings=["BearerToken"])
    resp = api.call_api(*params, _request_timeout=(10.0, 20.0))
    if resp.status != 200:
        return int(resp.status), [resp.read()]
    return 200, list(resp.response.stream(65536, decode_content=True))


def test_a_watch_streams_the_same_events_one_chunk_each(
        clients: tuple[ApiClient, ApiClient, KubeApiServer, KubeApiServer]) -> None:
    http, local, over_http, in_process = clients
    # Given the same write in both emulators after a known resourceVersion
    rv = str(over_http.store.resource_version)
    for server in (over_http, in_process):
        server.store.bind("default", "pending-0", "n1")
        server.store.create("pods", _pod("late", app="batch"))
    query = [("watch", "1"), ("resourceVersion", rv), ("timeoutSeconds", "1"), ("allowWatchBookmarks", "true"),
             ("fieldSelector", "spec.nodeName=,status.phase!=Succeeded,status.phase!=Failed")]
    # When each is watched from that version
    want, got = _watch(http, query), _watch(local, query)
    # Then the events are the same, each its own chunk (a bound pod leaves the selection: DELETED)
    assert got == want
    assert [json.loads(c)["type"] for c in got[1]] == ["DELETED", "ADDED"]
    # And a watch from a compacted version answers alike (an ERROR event with 410)
    for server in (over_http, in_process):
        server.store.compact()
    old = [("watch", "1"), ("resourceVersion", rv), ("timeoutSeconds", "1")]
    assert _watch(local, old) == _watch(http, old)
    assert json.loads(_watch(local, old)[1][0])["object"]["code"] == 410


def test_a_catch_up_until_quiet_reads_the_same_events_without_waiting_in_process(
        clients: tuple[ApiClient, ApiClient, KubeApiServer, KubeApiServer]) -> None:
    http, local, over_http, in_process = clients
    # Given the same writes in both emulators after a known resourceVersion
    rv = str(over_http.store.resource_version)
    for server in (over_http, in_process):
        server.store.create("pods", _pod("late", app="batch"))
        server.store.bind("default", "pending-0", "n1")
    # When the warm cluster cache's catch-up reads each until 50 ms of quiet (a server timeout of 30 s: a stream
    # held until it would take 30 s, which the bound below tells apart from any delay a busy machine adds)
    def catch_up(api: ApiClient) -> tuple[list[tuple[str, str]], float]:
        started = time.monotonic()
        events = list(KubeCluster(api).watch_raw("/api/v1/pods", resource_version=rv, timeout_seconds=30.0,
                                                 quiet_seconds=0.05))
        return [(e["type"], e["object"]["metadata"]["name"]) for e in events], time.monotonic() - started
    (want, _), (got, took) = catch_up(http), catch_up(local)
    # Then both read the same backlog, and in-process the stream ends with it: the stand-in does not hold
    # the caller until the server's timeoutSeconds (it has no socket read timeout to end it)
    assert got == want == [("ADDED", "late"), ("MODIFIED", "pending-0")]
    assert took < 10.0


@pytest.mark.parametrize("status", [500, 429, 0])
def test_injected_faults_look_the_same_through_both_transports(
        clients: tuple[ApiClient, ApiClient, KubeApiServer, KubeApiServer], status: int) -> None:
    http, local, over_http, in_process = clients
    request: Request = ("GET", "/api/v1/nodes", [], None, None)
    outcomes = []
    for api, server in ((http, over_http), (local, in_process)):
        # Given an injected error (0: the connection dropped mid-response)
        server.inject_error("/nodes", status)
        # When the nodes are listed
        try:
            outcomes.append(_call(api, request))
        except urllib3.exceptions.ProtocolError:
            outcomes.append("ProtocolError")  # type: ignore[arg-type]
    # Then both transports give the same answer (or both break off the same way)
    assert outcomes[0] == outcomes[1]
    if status == 0:
        assert outcomes[0] == "ProtocolError"
