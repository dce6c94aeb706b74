"""Virtual time: a clock implementing the autoscaler's ``Clock`` port and a heap of timed events.

The handlers run on the clock unchanged. When they ``sleep`` (a drain polling for evicted pods to go),
the world keeps moving: the sleep runs every due event (kubelet, scheduler, controllers), so a drain
sees its pods terminate and their replacements start. Invocations of other Lambda functions that fall
due meanwhile run inside the sleep, as they would run concurrently in AWS (the provisioner's scheduled
pass during the interruption function's drain).

The Lambda platform's limits per function (``EventLoop.functions``, a ``Function`` per label; the runner
fills them from the stack's settings): an invocation of a function already running its reserved
concurrency waits in the async-invoke queue until one returns, and is dropped once it has waited longer
than the function's maximum event age (the stack's 60 s for scheduled functions: stale ticks must not
pile up); an invocation that runs longer in virtual time than the function's timeout is counted as a
timeout (Lambda would have stopped it there). A label without limits runs one invocation at a time.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections import Counter
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
    on_drop: Action | None = field(compare=False, default=None)  # a schedule's next tick, even when dropped


@dataclass(frozen=True)
class Function:
    """A Lambda function's limits as deployed: reserved concurrency (None: unreserved, no limit of its own),
    the async queue's maximum event age (None: Lambda's 6 hours, never reached here) and the timeout."""

    concurrency: int | None = 1
    max_event_age: float | None = None
    timeout: float | None = None


@dataclass
class Invocation:
    """One invocation that ran: when it started and ended (virtual seconds) and whether it timed out."""

    function: str
    queued_at: float
    started: float
    ended: float
    timed_out: bool


class EventLoop:
    """Events ordered by (virtual time, insertion order); ``now`` is seconds since the simulation start."""

    def __init__(self, *, epoch: float) -> None:
        self.epoch = epoch
        self.now = 0.0
        self._heap: list[Event] = []
        # Events may be added from the interruption handler's drain threads (boto3 hooks fire there).
        self._heap_lock = threading.RLock()
        self._seq = itertools.count()
        self._running: Counter[str] = Counter()  # Lambda invocations under way, per function
        self.functions: dict[str, Function] = {}  # the platform's limits per function label
        self.invocations: list[Invocation] = []
        self.dropped: Counter[str] = Counter()  # async invocations dropped after the maximum event age
        self.on_timeout: Callable[[Invocation], None] | None = None
        self.processed = 0
        # Called after every event (the simulation's informer: it turns API writes into reactions).
        self.observer: Action | None = None

    def at(self, when: float, label: str, action: Action, *, lambda_call: bool = False,
           on_drop: Action | None = None) -> Event:
        with self._heap_lock:
            event = Event(max(when, self.now), next(self._seq), label, action, lambda_call, on_drop)
            heapq.heappush(self._heap, event)
        return event

    def after(self, delay: float, label: str, action: Action, *, lambda_call: bool = False,
              on_drop: Action | None = None) -> Event:
        return self.at(self.now + delay, label, action, lambda_call=lambda_call, on_drop=on_drop)

    def every(self, period: float, label: str, action: Action, *, start: float = 0.0,
              lambda_call: bool = False) -> None:
        """Run ``action`` at ``start`` and every ``period`` seconds after (a schedule such as rate(1 minute))."""
        def again() -> None:
            self.after(period, label, tick, lambda_call=lambda_call, on_drop=again)

        def tick() -> None:
            again()
            action()

        self.at(start, label, tick, lambda_call=lambda_call, on_drop=again)

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
            self._invoke(event)
        else:
            event.action()
        if self.observer is not None:
            self.observer()

    def _invoke(self, event: Event) -> None:
        limits = self.functions.get(event.label, Function())
        if limits.max_event_age is not None and self.now - event.at > limits.max_event_age:
            self.dropped[event.label] += 1
            if event.on_drop is not None:
                event.on_drop()
            return
        started = self.now
        self._running[event.label] += 1
        try:
            event.action()
        finally:
            self._running[event.label] -= 1
            ran = Invocation(event.label, event.at, started, self.now,
                             limits.timeout is not None and self.now - started > limits.timeout)
            self.invocations.append(ran)
            if ran.timed_out and self.on_timeout is not None:
                self.on_timeout(ran)

    def _at_limit(self, label: str) -> bool:
        limit = self.functions.get(label, Function()).concurrency
        return limit is not None and self._running[label] >= limit

    def timeouts(self) -> Counter[str]:
        return Counter(i.function for i in self.invocations if i.timed_out)

    def sleep(self, seconds: float) -> None:
        """Advance virtual time by ``seconds`` from inside a running event, running the world's events on
        the way; invocations of a Lambda function at its concurrency are queued until one returns."""
        target = self.now + max(0.0, seconds)
        deferred: list[Event] = []
        while (event := self._pop(target)) is not None:
            if event.lambda_call and self._at_limit(event.label):
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
