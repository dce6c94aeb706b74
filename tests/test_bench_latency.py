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
