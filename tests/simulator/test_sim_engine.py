"""The simulator's cooperative scheduler in virtual time (simulator/sim/engine.py, simulator/sim/tasks.py):
sleeps park their task without speeding the clock up for anyone else, workers on the injected executor
run beside their invocation, waits on their futures hand the baton back, the order is deterministic."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable

import pytest

from simulator.sim.engine import EventLoop, Function, VirtualClock
from simulator.sim.tasks import SimExecutor


def _loop(**functions: Function) -> EventLoop:
    loop = EventLoop(epoch=0.0)
    loop.functions = dict(functions)
    return loop


def test_two_tasks_sleeping_10_s_side_by_side_both_end_at_10() -> None:
    # Given an invocation that starts two workers, each sleeping 10 s on the virtual clock
    loop = _loop(interruption=Function(concurrency=None))
    clock = VirtualClock(loop)
    ended: dict[str, float] = {}
    waited: list[float] = []

    def drain(name: str) -> None:
        clock.sleep(10)
        ended[name] = loop.now

    def invocation() -> None:
        pool = SimExecutor(loop, max_workers=10)
        futures = [pool.submit(drain, n) for n in ("a", "b")]
        concurrent.futures.wait(futures)
        waited.append(loop.now)

    loop.at(0, "interruption", invocation, lambda_call=True)
    # When the loop runs
    loop.run_until(60)
    # Then both sleeps end at t=10, not one after the other (t=20), and the parent's wait ends with them
    assert ended == {"a": 10.0, "b": 10.0}
    assert waited == [10.0]
    assert [(i.started, i.ended) for i in loop.invocations] == [(0.0, 10.0)]


def test_the_worlds_events_run_while_a_task_sleeps_and_time_only_moves_when_all_are_parked() -> None:
    # Given a task sleeping 30 s, and world events at 5 s and 20 s
    loop = _loop(disruption=Function())
    seen: list[tuple[float, str]] = []

    def invocation() -> None:
        seen.append((loop.now, "starts"))
        loop.sleep(30)
        seen.append((loop.now, "wakes"))

    loop.at(0, "disruption", invocation, lambda_call=True)
    loop.at(5, "kubelet", lambda: seen.append((loop.now, "world at 5")))
    loop.at(20, "kubelet", lambda: seen.append((loop.now, "world at 20")))
    # When the loop runs
    loop.run_until(100)
    # Then the world's events interleave with the sleeping task in virtual-time order
    assert seen == [(0, "starts"), (5, "world at 5"), (20, "world at 20"), (30, "wakes")]


@pytest.mark.parametrize("how", ["result", "wait", "as_completed", "with"])
def test_every_way_of_waiting_on_workers_parks_the_parent(how: str) -> None:
    # Given an invocation whose three workers sleep 3, 1 and 2 s, waited on in one of the standard ways
    loop = _loop(interruption=Function(concurrency=None))
    got: list[object] = []

    def work(seconds: float) -> float:
        loop.sleep(seconds)
        return loop.now

    waits: dict[str, Callable[[SimExecutor], None]] = {
        "result": lambda pool: got.extend(f.result() for f in [pool.submit(work, s) for s in (3, 1, 2)]),
        "wait": lambda pool: got.extend(sorted(f.result() for f in concurrent.futures.wait(
            [pool.submit(work, s) for s in (3, 1, 2)]).done)),
        "as_completed": lambda pool: got.extend(f.result() for f in concurrent.futures.as_completed(
            [pool.submit(work, s) for s in (3, 1, 2)])),
        "with": lambda pool: [pool.submit(work, s) for s in (3, 1, 2)] and pool.shutdown(wait=True),
    }

    def invocation() -> None:
        waits[how](SimExecutor(loop, max_workers=4))
        got.append(("parent", loop.now))

    loop.at(0, "interruption", invocation, lambda_call=True)
    # When the loop runs
    loop.run_until(60)
    # Then the workers ran side by side and the parent resumed when the last ended (t=3)
    assert got[-1] == ("parent", 3.0)
    expected = {"result": [3.0, 1.0, 2.0], "wait": [1.0, 2.0, 3.0], "as_completed": [1.0, 2.0, 3.0], "with": []}
    assert got[:-1] == expected[how]


def test_the_executor_bounds_its_workers_like_a_thread_pool() -> None:
    # Given a pool of 2 workers and 5 calls sleeping 10 s each
    loop = _loop(interruption=Function(concurrency=None))
    starts: list[float] = []

    def work() -> None:
        starts.append(loop.now)
        loop.sleep(10)

    def invocation() -> None:
        pool = SimExecutor(loop, max_workers=2)
        concurrent.futures.wait([pool.submit(work) for _ in range(5)])

    loop.at(0, "interruption", invocation, lambda_call=True)
    # When the loop runs
    loop.run_until(100)
    # Then two run at once, the others start as workers free up
    assert starts == [0, 0, 10, 10, 20]
    assert loop.invocations[0].ended == 30


def test_a_workers_error_reaches_whoever_waits_on_its_future() -> None:
    # Given a worker that fails after sleeping
    loop = _loop(interruption=Function(concurrency=None))
    caught: list[str] = []

    def work() -> None:
        loop.sleep(1)
        raise ValueError("drain failed")

    def invocation() -> None:
        try:
            SimExecutor(loop, max_workers=1).submit(work).result()
        except ValueError as exc:
            caught.append(f"{loop.now:g}: {exc}")

    loop.at(0, "interruption", invocation, lambda_call=True)
    # When the loop runs
    loop.run_until(10)
    # Then the parent sees the worker's error when it happened
    assert caught == ["1: drain failed"]


def test_unreserved_invocations_overlap_and_reserved_ones_queue() -> None:
    # Given an unreserved function and a function reserved to 1, each invoked 3 times at t=0, each
    # invocation sleeping 10 s
    loop = _loop(interruption=Function(concurrency=None), provisioner=Function(concurrency=1))
    for label in ("interruption", "provisioner"):
        for _ in range(3):
            loop.at(0, label, lambda: loop.sleep(10), lambda_call=True)
    # When the loop runs
    loop.run_until(100)
    # Then the unreserved ones all run 0-10; the reserved ones one after another
    spans = {f: [(i.started, i.ended) for i in loop.invocations if i.function == f]
             for f in ("interruption", "provisioner")}
    assert spans["interruption"] == [(0, 10)] * 3
    assert spans["provisioner"] == [(0, 10), (10, 20), (20, 30)]


def _timeline() -> list[tuple[float, str]]:
    loop = _loop(interruption=Function(concurrency=None))
    seen: list[tuple[float, str]] = []

    def drain(name: str, polls: int) -> None:
        for i in range(polls):
            seen.append((loop.now, f"{name} poll {i}"))
            loop.sleep(0.5)

    def invocation(batch: str) -> None:
        pool = SimExecutor(loop, max_workers=3)
        concurrent.futures.wait([pool.submit(drain, f"{batch}{n}", n + 2) for n in range(4)])
        seen.append((loop.now, f"batch {batch} done"))

    for b in "xyz":
        loop.at(1, "interruption", lambda b=b: invocation(b), lambda_call=True)  # type: ignore[misc]
    loop.every(0.7, "world", lambda: seen.append((loop.now, "world")))
    loop.run_until(10)
    return seen


def test_the_same_tasks_give_the_same_timeline_every_run() -> None:
    # Given three concurrent batches of drains polling every 0.5 s, and a world event every 0.7 s
    # When the same set-up runs twice
    first, second = _timeline(), _timeline()
    # Then the timelines are identical, event for event
    assert first == second
    assert sum(1 for _, what in first if what.endswith("done")) == 3


def test_tasks_still_sleeping_at_the_end_are_closed() -> None:
    # Given an invocation sleeping past the end of the run
    loop = _loop(interruption=Function(concurrency=None))
    after: list[float] = []

    def invocation() -> None:
        loop.sleep(1000)
        after.append(loop.now)

    loop.at(0, "interruption", invocation, lambda_call=True)
    loop.run_until(10)
    # When the loop is closed
    loop.close()
    # Then the task ended without running on, and is not recorded as an invocation that ran
    assert after == [] and loop.invocations == []


def test_concurrent_invocations_each_see_their_own_execution_environment() -> None:
    # Given two interruption invocations running side by side, each in a Lambda execution environment
    # of its own (the handler's batch processor and pools are per container in AWS), and a runtime
    # whose warm cache each invocation sets
    from autoscaler.handlers.runtime import WarmState
    from simulator.sim.containers import Containers

    loop = _loop(interruption=Function(concurrency=None))
    warm = WarmState()

    class Runtime:  # the runtime's warm state is all the environments touch
        def __init__(self) -> None:
            self.warm = warm

        def use_cluster_cache(self, cache: object) -> None:
            self.warm.cluster_cache = cache  # type: ignore[assignment]

    runtime = Runtime()
    containers = Containers(loop, lambda: runtime)  # type: ignore[arg-type,return-value]
    seen: dict[str, list[tuple[int, object]]] = {"a": [], "b": []}

    def invocation(name: str) -> None:
        with containers.enter("interruption"):
            runtime.use_cluster_cache(f"cache of {name}")
            for _ in range(3):
                assert warm.interruption is not None
                seen[name].append((id(warm.interruption.processor), warm.cluster_cache))
                loop.sleep(1)

    for name in "ab":
        loop.at(0, "interruption", lambda n=name: invocation(n), lambda_call=True)  # type: ignore[misc]
    # When they take turns
    try:
        loop.run_until(10)
    finally:
        containers.close()
    # Then each turn saw its own processor and cache, never the other's, and the runtime's own came back
    assert {p for p, _ in seen["a"]}.isdisjoint({p for p, _ in seen["b"]})
    assert len({p for p, _ in seen["a"]}) == len({p for p, _ in seen["b"]}) == 1
    assert {c for _, c in seen["a"]} == {"cache of a"} and {c for _, c in seen["b"]} == {"cache of b"}
    assert warm.interruption is None and containers.started == {"interruption": 2}
