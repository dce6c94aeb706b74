"""The cyclic GC's pause around large lists holds across threads: the gather lists the small collections on a
worker thread while the pods are listed, and the one that finishes first must not switch the GC back on."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from autoscaler.adapters.kube.stream import gc_paused


@pytest.fixture(autouse=True)
def gc_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_a_list_ending_on_another_thread_leaves_the_gc_paused_for_the_one_still_running() -> None:
    worker_in, main_in = threading.Event(), threading.Event()

    def worker() -> None:  # the worker's list begins first and ends while the main thread's still runs
        with gc_paused():
            worker_in.set()
            assert main_in.wait(30)

    thread = threading.Thread(target=worker)
    thread.start()
    assert worker_in.wait(30)
    with gc_paused():
        main_in.set()
        thread.join(30)
        assert not thread.is_alive()
        assert not gc.isenabled()  # the worker's pause ended; the main thread's list still runs without the GC
    assert gc.isenabled()  # the last pause ended: the GC is back on


def test_nested_pauses_restore_the_gc_only_if_it_was_on() -> None:
    gc.disable()
    with gc_paused(), gc_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()  # it was off before: a pause never switches it on
    gc.enable()
    with gc_paused():
        with gc_paused():
            pass
        assert not gc.isenabled()
    assert gc.isenabled()
