"""Drain ordering, PDBs, grace periods, deadlines and resumption, on the in-memory cluster fake
(``tests/app/fakes_cluster.FakeCluster``, held to the adapter's contract in ``tests/adapters/contract/``)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from autoscaler.adapters.clock import ManualClock
from autoscaler.app.drain import DrainResult, NotEvicted, drain
from autoscaler.app.ports import ClusterError
from autoscaler.domain.models import EvictionResult
from simulator.kube_store import Store
from tests.app.fakes_cluster import FakeCluster
from tests.kube_objects import node, pdb, pod


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def cluster(clock: ManualClock) -> FakeCluster:
    # Deletions complete at once unless a test turns graceful deletion on (then its kubelet stand-in,
    # store.finish_terminating(), confirms them).
    fake = FakeCluster(Store(clock=clock.now), clock=clock)
    fake.store.create("nodes", node("n1"))
    return fake


def _run(cluster: FakeCluster, clock: ManualClock, *, seconds: float,
         sleep: Callable[[float], None] | None = None) -> DrainResult:
    return drain("n1", cluster=cluster, clock=clock, deadline=clock.monotonic() + seconds,
                 sleep=sleep or clock.advance, poll_interval=1.0, retry_interval=5.0)


def test_drain_skips_mirror_daemonset_and_finished_pods(cluster: FakeCluster,
                                                        clock: ManualClock) -> None:
    st = cluster.store
    st.create("pods", pod("web", node="n1", ready=True))
    st.create("pods", pod("static", node="n1", annotations={"kubernetes.io/config.mirror": "x"}))
    st.create("pods", pod("agent", node="n1", owner_kind="DaemonSet"))
    st.create("pods", pod("job", node="n1", phase="Succeeded"))
    st.create("pods", pod("elsewhere", node="n2"))

    result = _run(cluster, clock, seconds=60)

    assert result.complete and result.evicted == ("default/web",)
    assert dict(result.skipped) == {"default/static": "mirror pod", "default/agent": "daemonset pod",
                                    "default/job": "finished (Succeeded)"}
    assert sorted(p["metadata"]["name"] for p in st.objects("pods")) == ["agent", "elsewhere", "job", "static"]


def test_critical_pods_go_only_after_the_others_are_gone(cluster: FakeCluster,
                                                         clock: ManualClock) -> None:
    st = cluster.store
    st.graceful_deletion = True
    st.create("pods", pod("dns", node="n1", priority_class="system-cluster-critical"))
    st.create("pods", pod("cni", node="n1", priority_class="system-node-critical"))
    st.create("pods", pod("web", node="n1"))
    st.create("pods", pod("api", node="n1"))
    order: list[list[str]] = []

    def kubelet(seconds: float) -> None:
        terminating = sorted(p["metadata"]["name"] for p in st.objects("pods")
                             if p["metadata"].get("deletionTimestamp"))
        if terminating:
            order.append(terminating)
        st.finish_terminating()
        clock.advance(seconds)

    result = _run(cluster, clock, seconds=120, sleep=kubelet)

    assert result.complete
    assert order == [["api", "web"], ["cni", "dns"]]
    assert result.evicted == ("default/api", "default/web", "default/cni", "default/dns")


def test_pdb_blocked_pod_is_reported_and_critical_wave_not_reached(cluster: FakeCluster, clock: ManualClock) -> None:
    st = cluster.store
    st.create("poddisruptionbudgets", pdb("db", match={"app": "db"}, max_unavailable=0))
    st.create("pods", pod("db-0", node="n1", labels={"app": "db"}, ready=True))
    st.create("pods", pod("web", node="n1", ready=True))
    st.create("pods", pod("dns", node="n1", priority_class="system-cluster-critical", ready=True))

    result = _run(cluster, clock, seconds=30)

    assert not result.complete
    assert result.evicted == ("default/web",)
    reasons = {n.pod: n.reason for n in result.not_evicted}
    assert reasons == {"default/db-0": "pdb", "default/dns": "timeout"}
    assert "disruption budget db needs 1 healthy pods" in next(
        n.message for n in result.not_evicted if n.pod == "default/db-0")
    assert clock.mono == pytest.approx(30.0)


def test_terminating_pods_past_the_deadline_are_timeouts(cluster: FakeCluster,
                                                         clock: ManualClock) -> None:
    cluster.store.graceful_deletion = True
    cluster.store.create("pods", pod("slow", node="n1", grace=600))

    result = _run(cluster, clock, seconds=10)

    assert result.evicted == ("default/slow",)
    assert result.not_evicted == (NotEvicted("default/slow", "timeout",
                                             "still terminating at the deadline (grace period 600s)"),)
    # The pod kept its own grace period: the drain did not shorten it.
    assert cluster.store.get("pods", "default", "slow")["metadata"]["deletionGracePeriodSeconds"] == 600


def test_drain_resumes_a_partly_drained_node(cluster: FakeCluster,
                                             clock: ManualClock) -> None:
    st = cluster.store
    st.graceful_deletion = True
    st.create("pods", pod("a", node="n1"))
    st.create("pods", pod("b", node="n1"))
    first = _run(cluster, clock, seconds=3)
    assert {n.pod for n in first.not_evicted} == {"default/a", "default/b"}
    st.finish_terminating()  # the kubelet finished "a" and "b" meanwhile
    st.create("pods", pod("c", node="n1"))

    def kubelet(seconds: float) -> None:
        st.finish_terminating()
        clock.advance(seconds)

    second = _run(cluster, clock, seconds=30, sleep=kubelet)

    assert second.complete and second.evicted == ("default/c",)


def test_drain_of_an_empty_node_is_complete_at_once(cluster: FakeCluster, clock: ManualClock) -> None:
    result = _run(cluster, clock, seconds=30)
    assert result.complete and result.evicted == () and clock.mono == 0.0


def test_eviction_errors_are_reported_as_errors(cluster: FakeCluster,
                                                clock: ManualClock) -> None:
    cluster.store.create("pods", pod("web", node="n1", ready=True))
    cluster.fail_next("evict", ClusterError("POST eviction: HTTP 403 Forbidden: not allowed", status=403,
                                            reason="Forbidden"), times=100)
    result = _run(cluster, clock, seconds=12)
    assert [(n.pod, n.reason) for n in result.not_evicted] == [("default/web", "error")]
    assert "403" in result.not_evicted[0].message


class _SlowApi(FakeCluster):
    """A cluster whose API server takes 0.3 s per eviction (virtual time)."""

    def __init__(self, store: Store, *, clock: ManualClock) -> None:
        super().__init__(store, clock=clock)
        self.manual = clock

    def evict(self, namespace: str, name: str, *, deadline: float, uid: str | None = None,
              grace_seconds: int | None = None, retry_blocked: bool = True) -> EvictionResult:
        self.manual.advance(0.3)
        return super().evict(namespace, name, deadline=deadline, uid=uid, grace_seconds=grace_seconds,
                             retry_blocked=retry_blocked)


def test_an_eviction_sweep_stops_at_the_deadline_between_pods(clock: ManualClock) -> None:
    # Issue 18 item 2: 110 pods at 0.3 s each is 33 s of sweeping; a 10 s deadline must hold.
    st = Store(clock=clock.now)
    st.create("nodes", node("n1"))
    st.graceful_deletion = True  # the pods stay terminating: the drain waits until its deadline
    for i in range(110):
        st.create("pods", pod(f"p{i:03d}", node="n1"))
    slow = _SlowApi(st, clock=clock)
    deadline = clock.monotonic() + 10
    result = drain("n1", cluster=slow, clock=clock, deadline=deadline, sleep=clock.advance,
                   poll_interval=1.0, retry_interval=5.0)
    assert not result.complete
    assert clock.monotonic() <= deadline + 0.3  # at most the eviction in flight at the deadline
    assert 30 <= len(result.evicted) <= 34


def test_a_pod_stuck_terminating_on_a_dead_kubelet_is_waited_for_a_minute_past_its_deletion_time(
        cluster: FakeCluster, clock: ManualClock) -> None:
    # Given a node whose kubelet is gone: the evicted pod keeps its deletionTimestamp (the API server sets
    # it to the eviction's time plus the 30 s grace period) because nothing confirms the deletion
    st = cluster.store
    st.clock = clock.now
    st.graceful_deletion = True
    st.create("pods", pod("web", node="n1", grace=30))
    start = clock.monotonic()

    # When the drain has 80 s: the pod is not yet stuck (30 s grace + 60 s), so it is a timeout
    early = _run(cluster, clock, seconds=80)
    assert [n.reason for n in early.not_evicted] == ["timeout"]

    # When a later drain runs on: it stops waiting once the pod is a minute past its deletion time, as
    # Karpenter's drain does (IsStuckTerminating), instead of holding the node until its deadline
    late = _run(cluster, clock, seconds=600)
    assert late.complete
    assert 90 < clock.monotonic() - start <= 92
    assert st.get("pods", "default", "web")["metadata"]["deletionTimestamp"]  # still there: the kubelet is dead
