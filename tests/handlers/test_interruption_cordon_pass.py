"""The cordon pass of a Health event naming many nodes (issue 33 item 17), through the real handler against
moto and the Kubernetes API emulator.

Time is counted in API round trips, never in wall time: every call on the cluster port advances the calling
thread's logical clock by one, a task on a pool starts at the later of its submitter's clock and its worker's
clock (a worker runs one task after the other), and whoever takes a task's result catches up with the
task's clock (a Lamport clock). The clock of the thread that asks for the first eviction is then the number
of sequential round trips the batch made before it.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import pytest

from autoscaler.app.interruption_batch import CORDON_WORKERS, DRAIN_WORKERS, MESSAGE_WORKERS, DrainPools
from autoscaler.handlers import interruption as handler_module
from autoscaler.handlers.runtime import InterruptionWarm
from tests.handlers.interruption_world import World, event_for

NODES = 40
# Cordoned one after another, 40 nodes made 283 sequential round trips (as counted here) before the first
# eviction, which came 16.7 s into the batch on EKS: about 59 ms a round trip. The first eviction within 2 s
# is then at most 33 round trips.
ROUND_TRIP_SECONDS = 16.7 / 283
FIRST_EVICTION_SECONDS = 2.0


class RoundTrips:
    """A logical clock per thread, in API round trips."""

    def __init__(self) -> None:
        self._local = threading.local()
        self.first_eviction: int | None = None
        self._lock = threading.Lock()

    def now(self) -> int:
        return int(getattr(self._local, "ticks", 0))

    def advance_to(self, ticks: int) -> None:
        self._local.ticks = max(self.now(), ticks)

    def call(self, name: str) -> None:
        if name == "evict":
            with self._lock:
                if self.first_eviction is None:
                    self.first_eviction = self.now()
        self._local.ticks = self.now() + 1


class _Joined(Future[Any]):
    """A task's future whose result brings the taker's clock up to the task's end."""

    def __init__(self, clock: RoundTrips) -> None:
        super().__init__()
        self.clock, self.ended = clock, 0

    def result(self, timeout: float | None = None) -> Any:
        try:
            return super().result(timeout)
        finally:
            self.clock.advance_to(self.ended)


class CountingPool(Executor):
    """A bounded pool whose tasks go to its workers in turn, each worker one task after the other: which
    worker runs a task never depends on how fast the machine is, so neither does the count."""

    def __init__(self, clock: RoundTrips, workers: int) -> None:
        self.clock, self.turn = clock, itertools.count()
        self.workers = [ThreadPoolExecutor(max_workers=1) for _ in range(workers)]

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        outer, at = _Joined(self.clock), self.clock.now()

        def run() -> Any:
            self.clock.advance_to(at)
            try:
                return fn(*args, **kwargs)
            finally:
                outer.ended = self.clock.now()

        def done(inner: Future[Any]) -> None:
            exc = inner.exception()
            if exc is not None:
                outer.set_exception(exc)
            else:
                outer.set_result(inner.result())

        worker = self.workers[next(self.turn) % len(self.workers)]
        worker.submit(run).add_done_callback(done)
        return outer

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        for worker in self.workers:
            worker.shutdown(wait=wait, cancel_futures=cancel_futures)


class CountingCluster:
    """The cluster port, each call one round trip on the calling thread's clock."""

    def __init__(self, inner: Any, clock: RoundTrips) -> None:
        self._inner, self._clock = inner, clock

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            self._clock.call(name)
            return attr(*args, **kwargs)
        return call


def test_issue33_item_17_a_health_event_naming_40_nodes_evicts_within_a_few_round_trips(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = RoundTrips()
    ids = []
    for i in range(NODES):
        ids.append(world.add_node(f"h{i:02d}", owned=False))
        world.add_pod(f"app-{i:02d}", f"h{i:02d}")
    build = handler_module.build_service

    def counted(rt: Any) -> Any:
        service = build(rt)
        return replace(service, cluster=CountingCluster(service.cluster, clock))  # its NodeStates too
    monkeypatch.setattr(handler_module, "build_service", counted)
    pools = DrainPools(nodes=CountingPool(clock, DRAIN_WORKERS), messages=CountingPool(clock, MESSAGE_WORKERS),
                       cordons=CountingPool(clock, CORDON_WORKERS))
    world.rt.warm.interruption = InterruptionWarm(processor=handler_module.batch_processor(), pools=pools)
    try:
        response = world.run(event_for("health-scheduled-change", *ids), message_ids=["health"])
    finally:
        for pool in (pools.nodes, pools.messages, pools.cordons):
            assert pool is not None
            pool.shutdown()
    assert response == {"batchItemFailures": []}
    assert sorted(world.evictions()) == sorted(f"default/app-{i:02d}" for i in range(NODES))
    assert all(world.node(f"h{i:02d}")["spec"].get("unschedulable") for i in range(NODES))  # type: ignore[index]
    assert clock.first_eviction is not None
    assert clock.first_eviction * ROUND_TRIP_SECONDS <= FIRST_EVICTION_SECONDS, clock.first_eviction
