"""Virtual time: a clock implementing the autoscaler's ``Clock`` port, a heap of timed events, and a
deterministic cooperative scheduler for everything that sleeps.

Every simulated Lambda invocation, and every worker a handler starts on an injected ``SimExecutor``
(``sim/tasks.py``), is a task; exactly one task (or the loop, running the world's events) runs at a time.
``clock.sleep(s)`` parks the calling task until virtual time ``now + s`` and hands control back to the
loop; waiting on a worker's future parks it until the future is done. The loop advances time only when
every task is parked or finished, and runs what falls due in (virtual time, insertion order): the world's
events (kubelet, scheduler, controllers) and the tasks' wake-ups alike. So a drain sees its pods
terminate and their replacements start; two tasks sleeping 10 s each side by side both wake at t+10 (no
sleep advances the clock for another); invocations of other functions run beside a sleeping one, as they
do in AWS; and the same scenario gives the same timeline every run.

The Lambda platform's limits per function (``EventLoop.functions``, a ``Function`` per label; the runner
fills them from the stack's settings): an invocation of a function already running its reserved
concurrency waits in the async-invoke queue until one returns, and is dropped once it has waited longer
than the function's maximum event age (the stack's 60 s for scheduled functions: stale ticks must not
pile up); an invocation that runs longer in virtual time than the function's timeout is counted as a
timeout (Lambda would have stopped it there). A label without limits runs one invocation at a time.

A sleep on a thread the loop does not know (a plain ``ThreadPoolExecutor`` worker of a handler, which
only sleeps in a Kubernetes client backoff) returns at once without moving virtual time
(``EventLoop.foreign_sleeps`` counts them): parking it would stall the task blocked on its pool.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from simulator.sim.tasks import Cancelled, Task

Action = Callable[[], None]

# A task holding the baton this long in wall time is blocked on something the scheduler cannot see (a real
# lock held by a parked task, a plain future): fail with that said rather than hang the run.
STALL_SECONDS = 900.0


@dataclass(order=True)
class Event:
    at: float
    seq: int
    label: str = field(compare=False)
    action: Action | None = field(compare=False)
    lambda_call: bool = field(compare=False, default=False)
    on_drop: Action | None = field(compare=False, default=None)  # a schedule's next tick, even when dropped
    task: Task | None = field(compare=False, default=None)  # a parked task's wake-up
    token: int = field(compare=False, default=0)


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
        self._heap_lock = threading.RLock()
        self._seq = itertools.count()
        self._running: Counter[str] = Counter()  # Lambda invocations under way, per function
        self._waiting: dict[str, deque[Event]] = {}  # invocations queued behind the reserved concurrency
        self.functions: dict[str, Function] = {}  # the platform's limits per function label
        self.invocations: list[Invocation] = []
        self.dropped: Counter[str] = Counter()  # async invocations dropped after the maximum event age
        self.on_timeout: Callable[[Invocation], None] | None = None
        self.processed = 0
        # Called after every event and every task's turn (the simulation's informer: API writes -> reactions).
        self.observer: Action | None = None
        # Called around each task's turn: the runner swaps the invocation's container state in and out.
        self.on_resume: Callable[[Task], None] | None = None
        self.on_park: Callable[[Task], None] | None = None
        self.wall_by_function: dict[str, float] = {}  # wall seconds the tasks of each function ran
        self.foreign_sleeps = 0
        self._owner = threading.get_ident()  # the loop's own thread
        self._current: Task | None = None  # the task holding the baton
        self._back = threading.Semaphore(0)  # released by a task when it parks or ends
        self._live: dict[int, Task] = {}  # tasks started and not ended, by id

    # ----- events ----------------------------------------------------------------------------------
    def at(self, when: float, label: str, action: Action, *, lambda_call: bool = False,
           on_drop: Action | None = None) -> Event:
        return self._push(Event(max(when, self.now), next(self._seq), label, action, lambda_call, on_drop))

    def after(self, delay: float, label: str, action: Action, *, lambda_call: bool = False,
              on_drop: Action | None = None) -> Event:
        return self.at(self.now + delay, label, action, lambda_call=lambda_call, on_drop=on_drop)

    def _push(self, event: Event) -> Event:
        with self._heap_lock:
            heapq.heappush(self._heap, event)
        return event

    def every(self, period: float, label: str, action: Action, *, start: float = 0.0,
              lambda_call: bool = False) -> None:
        """Run ``action`` at ``start`` and every ``period`` seconds after (a schedule such as rate(1 minute))."""
        def again() -> None:
            self.after(period, label, tick, lambda_call=lambda_call, on_drop=again)

        def tick() -> None:
            again()
            action()

        self.at(start, label, tick, lambda_call=lambda_call, on_drop=again)

    def busy_now(self) -> bool:
        """Whether more events are due at the current time (what a reading of the settled state waits for)."""
        with self._heap_lock:
            return bool(self._heap) and self._heap[0].at <= self.now

    def run_until(self, until: float) -> None:
        """Process every event due at or before ``until``, then stand the clock there. Tasks still parked
        (sleeping past ``until``) stay parked: a later ``run_until`` continues them, ``close`` ends them."""
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
        if event.task is not None:
            if event.token != event.task.token or event.task.done:
                return  # stale: the task was woken otherwise, or ended
            self._resume(event.task)
        elif event.lambda_call:
            self._invoke(event)
        elif event.action is not None:
            event.action()
        if self.observer is not None:
            self.observer()

    # ----- Lambda invocations ----------------------------------------------------------------------
    def _invoke(self, event: Event) -> None:
        if self._stale(event):
            return
        if self._at_limit(event.label):
            self._waiting.setdefault(event.label, deque()).append(event)
            return
        self._resume(self._start(event))

    def _stale(self, event: Event) -> bool:
        limits = self.functions.get(event.label, Function())
        if limits.max_event_age is not None and self.now - event.at > limits.max_event_age:
            self.dropped[event.label] += 1
            if event.on_drop is not None:
                event.on_drop()
            return True
        return False

    def _start(self, event: Event) -> Task:
        limits = self.functions.get(event.label, Function())
        started = self.now
        self._running[event.label] += 1
        action = event.action
        assert action is not None

        def ended(task: Task) -> None:
            self._running[event.label] -= 1
            if not task.cancelled:
                ran = Invocation(event.label, event.at, started, self.now,
                                 limits.timeout is not None and self.now - started > limits.timeout)
                self.invocations.append(ran)
                if ran.timed_out and self.on_timeout is not None:
                    self.on_timeout(ran)
            self._next_waiting(event.label)

        return self._spawn(event.label, event.label, action, root=None, on_end=ended)

    def _next_waiting(self, label: str) -> None:
        """A slot freed: the oldest queued invocation still within its event age starts (now, after what
        is already due now)."""
        queue = self._waiting.get(label)
        while queue and not self._at_limit(label):
            event = queue.popleft()
            if self._stale(event):
                continue
            task = self._start(event)
            self._push(Event(self.now, next(self._seq), label, None, task=task, token=task.token))

    def _at_limit(self, label: str) -> bool:
        limit = self.functions.get(label, Function()).concurrency
        return limit is not None and self._running[label] >= limit

    def timeouts(self) -> Counter[str]:
        return Counter(i.function for i in self.invocations if i.timed_out)

    # ----- tasks -----------------------------------------------------------------------------------
    def _spawn(self, name: str, label: str, body: Action, *, root: Task | None,
               on_end: Callable[[Task], None] | None = None) -> Task:
        task = Task(name=name, label=label, root=root, on_end=on_end)
        self._live[id(task)] = task
        threading.Thread(target=self._task_main, args=(task, body), name=f"sim:{name}", daemon=True).start()
        return task

    def spawn_worker(self, name: str, body: Action) -> Task:
        """A worker of the running invocation (``SimExecutor``): runnable now, after what is already due."""
        parent = self._current
        root = parent.invocation if parent is not None else None
        task = self._spawn(name, root.label if root is not None else "worker", body, root=root)
        self._push(Event(self.now, next(self._seq), name, None, task=task, token=task.token))
        return task

    def _task_main(self, task: Task, body: Action) -> None:
        task.ident = threading.get_ident()
        task.go.acquire()
        try:
            if task.cancelled:
                raise Cancelled
            body()
        except Cancelled:
            pass
        except BaseException as exc:  # re-raised on the loop's thread, as an event's error would be
            task.error = exc
        finally:
            task.done = True
            self._back.release()

    def _resume(self, task: Task) -> None:
        """Give ``task`` the baton until it parks or ends (the loop's thread only)."""
        self._current = task
        if self.on_resume is not None:
            self.on_resume(task)
        wall = time.perf_counter()
        task.go.release()
        if not self._back.acquire(timeout=STALL_SECONDS):
            raise RuntimeError(f"simulated task {task.name} ({task.label}) has not parked for {STALL_SECONDS:g} s "
                               "of wall time: it is blocked on something the virtual-time scheduler cannot see "
                               "(a real lock, a future of a plain ThreadPoolExecutor)")
        self.wall_by_function[task.label] = self.wall_by_function.get(task.label, 0.0) + time.perf_counter() - wall
        self._current = None
        if self.on_park is not None:
            self.on_park(task)
        if task.done:
            del self._live[id(task)]
            if task.on_end is not None:
                task.on_end(task)
            if task.error is not None and task.root is None:
                error, task.error = task.error, None
                raise error

    def _park(self, task: Task) -> None:
        """Hand the baton back (the task's own thread) and wait for the next turn."""
        self._back.release()
        task.go.acquire()
        if task.cancelled:
            raise Cancelled

    def current(self) -> Task | None:
        """The task running on the calling thread (None: the loop's thread or a thread it does not know)."""
        task = self._current
        return task if task is not None and task.ident == threading.get_ident() else None

    def sleep(self, seconds: float) -> None:
        """Virtual time passes by ``seconds`` for the caller: a task parks until then; the loop's own
        thread (a world event that waits) runs everything due until then; see the module docstring for
        any other thread."""
        task = self.current()
        if task is not None:
            task.token += 1
            self._push(Event(self.now + max(0.0, seconds), next(self._seq), task.name, None, task=task,
                             token=task.token))
            self._park(task)
        elif threading.get_ident() == self._owner:
            self.run_until(self.now + max(0.0, seconds))
        else:
            self.foreign_sleeps += 1

    def block(self, waiting: list[tuple[Task, int]], timeout: float | None) -> None:
        """Park the calling task until ``notify(waiting)`` (or ``timeout`` virtual seconds)."""
        task = self.current()
        if task is None:
            raise RuntimeError("a simulated future was waited on outside a simulated task (it would never end)")
        task.token += 1
        waiting.append((task, task.token))
        if timeout is not None:
            self._push(Event(self.now + max(0.0, timeout), next(self._seq), task.name, None, task=task,
                             token=task.token))
        self._park(task)

    def notify(self, waiting: list[tuple[Task, int]]) -> None:
        """Wake every task parked on ``waiting``: each runs now, after what is already due."""
        for task, token in waiting:
            self._push(Event(self.now, next(self._seq), task.name, None, task=task, token=token))
        waiting.clear()

    def close(self) -> None:
        """End every task still parked (a drain sleeping past the end of the run): each unwinds with
        ``Cancelled``; an invocation ended so is not recorded."""
        while self._live:
            task = next(iter(self._live.values()))
            task.cancelled = True
            task.token += 1
            self._resume(task)


class VirtualClock:
    """The ``Clock`` port on the loop's virtual time: ``now()`` is ``epoch + loop.now``; ``sleep`` parks
    the calling task (see ``EventLoop.sleep``)."""

    def __init__(self, loop: EventLoop) -> None:
        self.loop = loop

    def now(self) -> float:
        return self.loop.epoch + self.loop.now

    def monotonic(self) -> float:
        return self.loop.now

    def sleep(self, seconds: float) -> None:
        self.loop.sleep(seconds)
