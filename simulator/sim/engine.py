"""Virtual time: a clock implementing the autoscaler's ``Clock`` port and a heap of timed events.

The handlers run on the clock unchanged. When they ``sleep`` (a drain polling for evicted pods to go),
the world keeps moving: the sleep runs every due event (kubelet, scheduler, controllers), so a drain
sees its pods terminate and their replacements start. Invocations of other Lambda functions that fall
due meanwhile run inside the sleep, as they would run concurrently in AWS (the provisioner's scheduled
pass during the interruption function's drain); an invocation of a function that is already running
waits until it returns (each function runs one invocation at a time here, as with reserved
concurrency 1).
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

Action = Callable[[], None]


@dataclass(order=True)
class Event:
    at: float
    seq: int
    label: str = field(compare=False)
    action: Action = field(compare=False)
    lambda_call: bool = field(compare=False, default=False)


class EventLoop:
    """Events ordered by (virtual time, insertion order); ``now`` is seconds since the simulation start."""

    def __init__(self, *, epoch: float) -> None:
        self.epoch = epoch
        self.now = 0.0
        self._heap: list[Event] = []
        # Events may be added from the interruption handler's drain threads (boto3 hooks fire there).
        self._heap_lock = threading.RLock()
        self._seq = itertools.count()
        self._running: list[str] = []  # labels of the Lambda invocations under way, outermost first
        self.processed = 0
        # Called after every event (the simulation's informer: it turns API writes into reactions).
        self.observer: Action | None = None

    def at(self, when: float, label: str, action: Action, *, lambda_call: bool = False) -> Event:
        with self._heap_lock:
            event = Event(max(when, self.now), next(self._seq), label, action, lambda_call)
            heapq.heappush(self._heap, event)
        return event

    def after(self, delay: float, label: str, action: Action, *, lambda_call: bool = False) -> Event:
        return self.at(self.now + delay, label, action, lambda_call=lambda_call)

    def every(self, period: float, label: str, action: Action, *, start: float = 0.0,
              lambda_call: bool = False) -> None:
        """Run ``action`` at ``start`` and every ``period`` seconds after (a schedule such as rate(1 minute))."""
        def tick() -> None:
            self.after(period, label, tick, lambda_call=lambda_call)
            action()

        self.at(start, label, tick, lambda_call=lambda_call)

    def run_until(self, until: float) -> None:
        """Process every event due at or before ``until``, then stand the clock there."""
        while (event := self._pop(until)) is not None:
            self._run(event)
        self.now = max(self.now, until)

    def _pop(self, until: float) -> Event | None:
        with self._heap_lock:
            if self._heap and self._heap[0].at <= until:
                return heapq.heappop(self._heap)
            return None

    def _run(self, event: Event) -> None:
        self.now = max(self.now, event.at)
        self.processed += 1
        if event.lambda_call:
            self._running.append(event.label)
            try:
                event.action()
            finally:
                self._running.pop()
        else:
            event.action()
        if self.observer is not None:
            self.observer()

    def sleep(self, seconds: float) -> None:
        """Advance virtual time by ``seconds`` from inside a running event, running the world's events on
        the way; invocations of a Lambda function already running are postponed until it returns."""
        target = self.now + max(0.0, seconds)
        deferred: list[Event] = []
        while (event := self._pop(target)) is not None:
            if event.lambda_call and event.label in self._running:
                deferred.append(event)
                continue
            self._run(event)
        self.now = max(self.now, target)
        with self._heap_lock:
            for event in deferred:
                heapq.heappush(self._heap, event)


class VirtualClock:
    """The ``Clock`` port on the loop's virtual time: ``now()`` is ``epoch + loop.now``.

    The interruption handler drains nodes on worker threads; their sleeps take turns on a lock, each
    advancing the one virtual clock (so several concurrent drains make time pass a little faster than
    it would: an approximation the single-threaded world needs)."""

    def __init__(self, loop: EventLoop) -> None:
        self.loop = loop
        self._lock = threading.RLock()

    def now(self) -> float:
        return self.loop.epoch + self.loop.now

    def monotonic(self) -> float:
        return self.loop.now

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.loop.sleep(seconds)
