"""The eviction API as the product calls it: without a PodDisruptionBudget, under one that allows or refuses
the disruption (429), under several (500), with a uid precondition, and for pods that need no budget."""

from __future__ import annotations

import time

import pytest

from tests.adapters.contract.conftest import Server, port_level
from tests.kube_objects import pdb, pod
from tests.waiting import wait_for

pytestmark = pytest.mark.contract


def _running(server: Server, ns: str, name: str, labels: dict[str, str]) -> None:
    """A bound pod reported Running and Ready, as its kubelet would."""
    server.create(f"/api/v1/namespaces/{ns}/pods", pod(name, namespace=ns, node="n1", labels=labels))
    server.status_patch(f"/api/v1/namespaces/{ns}/pods/{name}", {
        "phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]})


def _budget(server: Server, ns: str, name: str, *, min_available: int, match: dict[str, str],
            expected: int) -> None:
    """A PDB, once the server knows its status (the real server's disruption controller computes it)."""
    server.create(f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets",
                  pdb(name, namespace=ns, match=match, min_available=min_available))

    def observed() -> bool:
        got = server.get(f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/{name}")
        st = (got or {}).get("status") or {}
        return bool(got) and st.get("observedGeneration") == got["metadata"]["generation"] and \
            st.get("expectedPods") == expected
    wait_for(observed, what=f"the status of PodDisruptionBudget {name}")


def _deadline() -> float:
    return time.monotonic() + 5


@port_level
def test_eviction_without_a_budget_deletes_the_pod_gracefully(server: Server, ns: str) -> None:
    _running(server, ns, "p", {"app": "a"})
    result = server.cluster().evict(ns, "p", deadline=_deadline())
    assert result.outcome == "evicted", result
    held = server.get(f"/api/v1/namespaces/{ns}/pods/p")
    assert held is not None and held["metadata"]["deletionTimestamp"]
    assert held["metadata"]["deletionGracePeriodSeconds"] == 30


@port_level
def test_eviction_under_a_budget_allows_then_refuses_with_429(server: Server, ns: str) -> None:
    for name in ("a", "b"):
        _running(server, ns, name, {"app": "web"})
    _budget(server, ns, "web", min_available=1, match={"app": "web"}, expected=2)
    cluster = server.cluster()
    assert cluster.evict(ns, "a", deadline=_deadline(), retry_blocked=False).outcome == "evicted"

    def refused() -> bool:
        status, body = server.request("POST", f"/api/v1/namespaces/{ns}/pods/b/eviction", {
            "apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "b", "namespace": ns}})
        assert status in (201, 429), body
        return status == 429 and body["reason"] == "TooManyRequests" and body["details"]["causes"][0][
            "reason"] == "DisruptionBudget"
    wait_for(refused, what="the eviction of b refused by its budget")
    result = cluster.evict(ns, "b", deadline=_deadline(), retry_blocked=False)
    assert result.outcome == "blocked", result
    assert "disruption budget web needs 1 healthy pods" in result.message  # what the drain reports
    assert server.get(f"/api/v1/namespaces/{ns}/pods/b") is not None


@port_level
def test_a_pod_under_two_budgets_cannot_be_evicted_500(server: Server, ns: str) -> None:
    _running(server, ns, "p", {"app": "web", "tier": "front"})
    _running(server, ns, "q", {"app": "web", "tier": "front"})
    _budget(server, ns, "one", min_available=0, match={"app": "web"}, expected=2)
    _budget(server, ns, "two", min_available=0, match={"tier": "front"}, expected=2)
    status, body = server.request("POST", f"/api/v1/namespaces/{ns}/pods/p/eviction", {
        "apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p", "namespace": ns}})
    assert status == 500 and "more than one PodDisruptionBudget" in body["message"], body
    result = server.cluster().evict(ns, "p", deadline=_deadline(), retry_blocked=False)
    assert result.outcome in ("error", "throttled"), result


@port_level
def test_a_pending_pod_is_evicted_whatever_its_budget(server: Server, ns: str) -> None:
    server.create(f"/api/v1/namespaces/{ns}/pods", pod("waiting", namespace=ns, labels={"app": "web"}))
    _budget(server, ns, "web", min_available=5, match={"app": "web"}, expected=1)
    assert server.cluster().evict(ns, "waiting", deadline=_deadline(), retry_blocked=False).outcome == "evicted"
    assert server.get(f"/api/v1/namespaces/{ns}/pods/waiting") is None  # unbound: deleted at once


@port_level
def test_eviction_with_a_uid_of_another_pod_is_gone(server: Server, ns: str) -> None:
    _running(server, ns, "p", {"app": "a"})
    result = server.cluster().evict(ns, "p", deadline=_deadline(), uid="00000000-0000-0000-0000-000000000000")
    assert result.outcome == "gone", result
    assert server.get(f"/api/v1/namespaces/{ns}/pods/p") is not None
    assert server.cluster().evict(ns, "missing", deadline=_deadline()).outcome == "gone"


@port_level
def test_eviction_with_a_grace_period(server: Server, ns: str) -> None:
    _running(server, ns, "p", {"app": "a"})
    uid = server.must("GET", f"/api/v1/namespaces/{ns}/pods/p")["metadata"]["uid"]
    assert server.cluster().evict(ns, "p", deadline=_deadline(), uid=uid, grace_seconds=7).outcome == "evicted"
    held = server.get(f"/api/v1/namespaces/{ns}/pods/p")
    assert held is not None and held["metadata"]["deletionGracePeriodSeconds"] == 7
