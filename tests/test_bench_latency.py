"""The benchmarks' latency model (``benchmarks/provisioner_pass._Latency``): waits that really ran at the
same time on different threads are charged once, waits one after another add up. Where the overlap itself is
judged, the waits' start times are set by the test, not taken from threads a busy machine may start late."""

from __future__ import annotations

import threading
import time

import pytest

from benchmarks import provisioner_pass
from benchmarks.provisioner_pass import _Latency

WAIT = 0.05


class Timeline:
    """The benchmark module's ``time`` for the overlap model: ``perf_counter`` reads a time the test sets and
    ``sleep`` returns at once, so each wait starts exactly when the test says (real threads started under
    load begin late, and the overlap is what is being judged)."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        return None


def test_waits_at_the_same_time_count_once_and_waits_in_turn_add_up(monkeypatch: pytest.MonkeyPatch) -> None:
    timeline = Timeline()
    monkeypatch.setattr(provisioner_pass, "time", timeline)
    # Given a worker wait at 0 s and a main-thread wait at 0.01 s (they overlap by 0.04 s)
    latency = _Latency()
    worker = threading.Thread(target=latency.spend, args=(WAIT,))
    worker.start()
    worker.join()
    timeline.now = 0.01
    latency.spend(WAIT)
    # When they are charged
    # Then the overlapped model charges their union (0.06 s, about one wait), the summed model two
    assert latency.overlapped(0.0, 1.0) == pytest.approx(0.06)
    assert latency.within(0.0, 1.0) == 2 * WAIT
    # And given two more waits one after the other, both are charged in full
    timeline.now = 1.0
    latency.spend(WAIT)
    timeline.now = 1.0 + WAIT
    latency.spend(WAIT)
    assert latency.within(1.0, 2.0) == 2 * WAIT
    assert latency.overlapped(1.0, 2.0) == pytest.approx(2 * WAIT)


def test_a_cluster_reads_workers_overlap_its_main_thread_and_other_workers_add_up() -> None:
    # Given a phase with a cluster read: the main thread waits twice while a worker started with the read waits
    # once, then (after the read) a pool worker waits once more
    latency = _Latency()
    t0 = time.perf_counter()
    reader = threading.Thread(target=latency.spend, args=(WAIT,))
    reader.start()
    latency.spend(WAIT)
    latency.spend(WAIT)
    reader.join()
    latency.read(t0, time.perf_counter())
    after = threading.Thread(target=latency.spend, args=(WAIT,))
    after.start()
    after.join()
    t1 = time.perf_counter()
    # When the phase's critical path is charged
    path, main = latency.critical(t0, t1)
    # Then the read costs the longer of the main thread's waits (2) and its worker's chain (1), and the worker
    # after it adds its own (1); the main thread's waits are reported apart
    assert main == 2 * WAIT
    assert path == 3 * WAIT
    # And without the read window, the same waits add up as before (main + the longest worker chain)
    plain = _Latency()
    t2 = time.perf_counter()
    plain.spend(WAIT)
    worker = threading.Thread(target=plain.spend, args=(WAIT,))
    worker.start()
    worker.join()
    assert plain.critical(t2, time.perf_counter()) == (2 * WAIT, WAIT)
