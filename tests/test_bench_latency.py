"""The benchmarks' latency model (``benchmarks/provisioner_pass._Latency``): waits that really ran at the
same time on different threads are charged once, waits one after another add up."""

from __future__ import annotations

import threading
import time

from benchmarks.provisioner_pass import _Latency

WAIT = 0.05


def test_waits_at_the_same_time_count_once_and_waits_in_turn_add_up() -> None:
    # Given a main-thread wait and a worker wait that run at the same time
    latency = _Latency()
    t0 = time.perf_counter()
    worker = threading.Thread(target=latency.spend, args=(WAIT,))
    worker.start()
    latency.spend(WAIT)
    worker.join()
    t1 = time.perf_counter()
    # When they are charged
    # Then the overlapped model charges about one wait, the summed model two
    assert WAIT <= latency.overlapped(t0, t1) < 1.6 * WAIT
    assert latency.within(t0, t1) == 2 * WAIT
    # And given two more waits one after the other, both are charged in full
    t2 = time.perf_counter()
    latency.spend(WAIT)
    latency.spend(WAIT)
    t3 = time.perf_counter()
    assert latency.within(t2, t3) == 2 * WAIT
    assert abs(latency.overlapped(t2, t3) - 2 * WAIT) < 1e-6
