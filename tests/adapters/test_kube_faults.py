"""KubeCluster under API faults (issue 18 items 11-13): 410 Gone during a paginated list, dropped and
expired watches, 429/5xx storms on node PATCHes and evictions, against the Kubernetes API emulator."""

from __future__ import annotations

import threading
import time

import pytest

from autoscaler.adapters.clock import ManualClock
from autoscaler.adapters.kube.cluster import KubeCluster
from autoscaler.app.drain import drain
from autoscaler.app.ports import ClusterError
from simulator.kube_api import KubeApiServer, client_for
from tests.kube_objects import node, pdb, pod


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def cluster(kube_api: KubeApiServer, clock: ManualClock) -> KubeCluster:
    return KubeCluster(client_for(kube_api.url), clock=clock, sleep=clock.advance, page_size=2,
                       backoff_base=1.0, backoff_max=4.0)


# ----- item 12: list from scratch after 410 --------------------------------------------------------
def test_a_list_restarted_after_410_mid_pagination_returns_each_object_once(
        kube_api: KubeApiServer, cluster: KubeCluster) -> None:
    for name in "abcde":
        kube_api.store.create("pods", pod(name))
    # The second page's continue token has expired: the API server answers 410 Gone.
    kube_api.inject_error("/api/v1/pods", 410, 1, method="GET", query_substring="continue=")
    names = [p.name for p in cluster.pods()]
    assert names == ["a", "b", "c", "d", "e"]


def test_a_continue_token_older_than_a_compaction_is_410_in_the_emulator_too(
        kube_api: KubeApiServer, cluster: KubeCluster) -> None:
    for name in "abcde":
        kube_api.store.create("pods", pod(name))
    _, _, token, _ = kube_api.store.list_raw("pods", limit=2)
    kube_api.store.compact()
    kube_api.store.create("pods", pod("f"))
    with pytest.raises(Exception, match="too old"):
        kube_api.store.list_raw("pods", limit=2, continue_token=token)
    assert [p.name for p in cluster.pods()] == ["a", "b", "c", "d", "e", "f"]


def test_a_list_expiring_every_time_raises_naming_the_path(kube_api: KubeApiServer, cluster: KubeCluster) -> None:
    for name in "abcde":
        kube_api.store.create("pods", pod(name))
    kube_api.inject_error("/api/v1/pods", 410, 100, method="GET", query_substring="continue=")
    with pytest.raises(ClusterError, match=r"/api/v1/pods: the list expired \(410 Gone\)"):
        cluster.pods()


# ----- item 13: watch resumes -------------------------------------------------------------------
def _create_later(kube_api: KubeApiServer, obj: dict[str, object], delay: float) -> threading.Thread:
    def run() -> None:
        time.sleep(delay)
        kube_api.store.create("pods", obj)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_a_dropped_watch_resumes_and_still_delivers(kube_api: KubeApiServer) -> None:
    cluster = KubeCluster(client_for(kube_api.url), backoff_base=0.05)  # real clock: the watch waits on the server
    kube_api.inject_error("/api/v1/pods", 0, 1, method="GET", query_substring="watch=1")
    _create_later(kube_api, pod("late"), 0.5)
    seen = []
    for p in cluster.watch_pending_pods(timeout_seconds=5):
        seen.append(p.name)
        break
    assert seen == ["late"]
    assert len(kube_api.store.watches) >= 1  # the dropped stream was opened again


def test_a_watch_resuming_past_compaction_relists_and_misses_no_pending_pod(kube_api: KubeApiServer) -> None:
    cluster = KubeCluster(client_for(kube_api.url), backoff_base=0.05)
    old_rv = str(kube_api.store.resource_version)
    kube_api.store.create("pods", pod("went-pending-in-the-gap"))
    kube_api.store.create("pods", pod("bound", node="n1"))
    kube_api.store.compact()  # the resume version is now too old: 410 Expired
    _create_later(kube_api, pod("after"), 0.5)
    seen: list[str] = []
    for p in cluster.watch_pending_pods(timeout_seconds=5, resource_version=old_rv):
        seen.append(p.name)
        if {"went-pending-in-the-gap", "after"} <= set(seen):
            break
    # Both arrive (the re-list may already hold "after" when the machine is slow); the bound pod never does.
    assert {"went-pending-in-the-gap", "after"} <= set(seen) and "bound" not in seen


def test_a_410_status_on_watch_resume_relists_instead_of_ending_watch_mode(kube_api: KubeApiServer) -> None:
    cluster = KubeCluster(client_for(kube_api.url), backoff_base=0.05)
    kube_api.store.create("pods", pod("waiting"))
    kube_api.inject_error("/api/v1/pods", 410, 1, method="GET", query_substring="watch=1")
    seen = [p.name for p in _first(cluster.watch_pending_pods(timeout_seconds=3), 1)]
    assert seen == ["waiting"]


def _first(it: object, n: int) -> list[object]:
    out = []
    for item in it:  # type: ignore[attr-defined]
        out.append(item)
        if len(out) >= n:
            break
    return out


# ----- item 5 / 11: PATCH and eviction retries ------------------------------------------------------
@pytest.mark.parametrize("status", [500, 429, 503])
def test_node_patches_are_retried_through_throttling_and_server_errors(
        kube_api: KubeApiServer, cluster: KubeCluster, clock: ManualClock, status: int) -> None:
    kube_api.store.create("nodes", node("n1"))
    kube_api.inject_error("/api/v1/nodes/n1", status, 2, method="PATCH")
    start = clock.monotonic()
    assert cluster.cordon("n1") is True
    assert kube_api.store.get("nodes", None, "n1")["spec"]["unschedulable"] is True
    assert clock.monotonic() - start == pytest.approx(1.0 + 2.0)  # backed off 1 s, then 2 s


def test_a_patch_storm_longer_than_the_retries_raises_with_the_status(
        kube_api: KubeApiServer, cluster: KubeCluster) -> None:
    kube_api.store.create("nodes", node("n1"))
    kube_api.inject_error("/api/v1/nodes/n1", 500, 50, method="PATCH")
    with pytest.raises(ClusterError) as err:
        cluster.cordon("n1")
    assert err.value.status == 500


def test_api_throttling_on_evictions_is_retried_and_not_a_pdb_refusal(
        kube_api: KubeApiServer, cluster: KubeCluster, clock: ManualClock) -> None:
    kube_api.store.create("pods", pod("p", node="n1"))
    kube_api.inject_error("/pods/p/eviction", 429, 2)
    result = cluster.evict("default", "p", deadline=clock.monotonic() + 60, retry_blocked=False)
    assert (result.outcome, result.attempts, result.throttled_attempts) == ("evicted", 3, 2)


def test_a_throttling_storm_ends_throttled_never_blocked(
        kube_api: KubeApiServer, cluster: KubeCluster, clock: ManualClock) -> None:
    kube_api.store.create("pods", pod("p", node="n1"))
    kube_api.inject_error("/pods/p/eviction", 429, 100)
    result = cluster.evict("default", "p", deadline=clock.monotonic() + 10)
    assert result.outcome == "throttled"
    assert result.throttled_attempts == result.attempts > 1


def test_drain_counts_pdb_refusals_apart_from_throttling(
        kube_api: KubeApiServer, cluster: KubeCluster, clock: ManualClock) -> None:
    st = kube_api.store
    st.create("nodes", node("n1"))
    st.create("pods", pod("web-1", node="n1", labels={"app": "web"}))
    st.create("pods", pod("batch", node="n1"))
    st.create("poddisruptionbudgets", pdb("web", match={"app": "web"}, min_available=1))
    kube_api.inject_error("/pods/batch/eviction", 429, 3)  # API priority and fairness, not a PDB
    result = drain("n1", cluster=cluster, clock=clock, deadline=clock.monotonic() + 12, sleep=clock.advance,
                   poll_interval=1.0, retry_interval=5.0)
    assert [p.pod for p in result.not_evicted] == ["default/web-1"]
    assert result.not_evicted[0].reason == "pdb"
    assert result.throttled == 3
    assert result.blocked >= 2  # the PDB refused every retry
    assert "default/batch" in result.evicted
