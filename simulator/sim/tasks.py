"""Cooperative tasks in virtual time: what the event loop (``sim/engine.py``) runs Lambda invocations and
their worker threads as, and the executor the simulator injects into the handlers' pools.

A task is a real thread, but only one task (or the loop itself) runs at a time: the loop hands a task the
baton and waits until the task parks (it slept, or waits for a future) or ends. Nothing here reads the
wall clock or a random source, so the order of everything is the heap's (virtual time, insertion order):
the same scenario gives the same timeline.

``SimExecutor`` stands in for ``concurrent.futures.ThreadPoolExecutor`` (same bound on workers, same
``submit`` / ``shutdown``): each submitted call runs as a task of the submitting invocation. Its futures
are standard ``Future`` objects whose condition and waiters' events park the calling task instead of
blocking its thread, so ``Future.result()``, ``concurrent.futures.wait()`` and ``as_completed()`` in
unchanged handler code hand the baton back while they wait. (They rely on two attributes of CPython's
``Future``, ``_condition`` and ``_waiters``, stable since 3.2; ``tests/simulator/test_sim_engine.py`` checks
all three calls, so a Python upgrade that changed them fails there, not as a hung simulation.)
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from typing import Any, ParamSpec, Protocol, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


class Cancelled(BaseException):
    """Raised inside a task the loop abandons when a run ends (its thread unwinds and ends). A
    ``BaseException`` so the handlers' ``except Exception`` clauses do not swallow it."""


@dataclass(eq=False)
class Task:
    """One cooperative task: a Lambda invocation (``root`` None) or a worker of one."""

    name: str
    label: str  # the function whose work this is (wall-time accounting, container state)
    root: Task | None = None
    go: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))
    token: int = 0  # bumped at every park; a wake-up carrying an older token is stale
    ident: int = 0  # its thread's identifier, once started
    done: bool = False
    cancelled: bool = False
    error: BaseException | None = None
    context: Any = None  # the runner's per-invocation state (its Lambda container)
    on_end: Callable[[Task], None] | None = None  # loop-side bookkeeping once the task ends

    @property
    def invocation(self) -> Task:
        return self.root or self


class Waitable(Protocol):
    def block(self, waiting: list[tuple[Task, int]], timeout: float | None) -> None: ...

    def notify(self, waiting: list[tuple[Task, int]]) -> None: ...


class TaskLoop(Waitable, Protocol):
    """What a ``SimExecutor`` needs of the loop (``sim/engine.EventLoop``): this module never imports the
    engine, which imports it."""

    def spawn_worker(self, name: str, body: Callable[[], None]) -> Task: ...


class _CoopCondition:
    """A ``threading.Condition`` for one-at-a-time tasks: no lock is needed (nothing else runs meanwhile);
    ``wait`` parks the calling task until ``notify_all``."""

    def __init__(self, loop: Waitable) -> None:
        self._loop = loop
        self._waiting: list[tuple[Task, int]] = []

    def __enter__(self) -> bool:
        return True

    def __exit__(self, *exc: object) -> None:
        return None

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return True

    def release(self) -> None:
        return None

    def wait(self, timeout: float | None = None) -> bool:
        self._loop.block(self._waiting, timeout)
        return True

    def notify_all(self) -> None:
        self._loop.notify(self._waiting)

    notify = notify_all  # every waiter re-checks the future's state anyway


class _CoopEvent:
    """A ``threading.Event`` whose ``wait`` parks the calling task (the event of a ``wait()`` waiter)."""

    def __init__(self, loop: Waitable) -> None:
        self._loop = loop
        self._flag = False
        self._waiting: list[tuple[Task, int]] = []

    def is_set(self) -> bool:
        return self._flag

    def set(self) -> None:
        self._flag = True
        self._loop.notify(self._waiting)

    def clear(self) -> None:
        self._flag = False

    def wait(self, timeout: float | None = None) -> bool:
        if not self._flag:
            self._loop.block(self._waiting, timeout)
        return self._flag


class _CoopWaiters(list[Any]):
    """A future's waiter list: ``wait()`` / ``as_completed()`` install their waiter here before blocking on
    its event; the event is swapped for a cooperative one so the block parks the task."""

    def __init__(self, loop: Waitable) -> None:
        super().__init__()
        self._loop = loop

    def append(self, waiter: Any) -> None:
        if not isinstance(waiter.event, _CoopEvent):
            waiter.event = _CoopEvent(self._loop)
        super().append(waiter)


class SimFuture(Future[T]):
    """A standard future whose waits park the waiting task (see the module docstring)."""

    def __init__(self, loop: Waitable) -> None:
        super().__init__()
        self._condition = _CoopCondition(loop)  # type: ignore[assignment]
        self._waiters = _CoopWaiters(loop)


class SimExecutor(Executor):
    """``ThreadPoolExecutor``'s contract in virtual time: at most ``max_workers`` calls run at once (the rest
    wait, in submission order), each as a task of the submitting invocation."""

    def __init__(self, loop: TaskLoop, *, max_workers: int, name: str = "worker") -> None:
        self._loop, self.max_workers, self.name = loop, max_workers, name
        self._queue: deque[tuple[SimFuture[Any], Callable[[], Any]]] = deque()
        self._busy = 0
        self._started = 0
        self._outstanding: list[SimFuture[Any]] = []

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        future: SimFuture[T] = SimFuture(self._loop)
        self._queue.append((future, lambda: fn(*args, **kwargs)))
        self._outstanding.append(future)
        self._start_more()
        return future

    def _start_more(self) -> None:
        while self._queue and self._busy < self.max_workers:
            future, call = self._queue.popleft()
            if not future.set_running_or_notify_cancel():
                continue
            self._busy += 1
            self._started += 1
            self._loop.spawn_worker(f"{self.name}-{self._started}", self._body(future, call))

    def _body(self, future: SimFuture[Any], call: Callable[[], Any]) -> Callable[[], None]:
        def run() -> None:
            try:
                result = call()
            except Cancelled:
                raise
            except BaseException as exc:  # the future carries it to whoever waits, as a pool's does
                future.set_exception(exc)
            else:
                future.set_result(result)
            finally:
                self._busy -= 1
                self._outstanding = [f for f in self._outstanding if not f.done()]
                self._start_more()
        return run

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        if cancel_futures:
            for future, _ in self._queue:
                future.cancel()
            self._queue.clear()
        if wait:
            for future in list(self._outstanding):
                if not future.cancelled():
                    future.exception()  # parks until it is done; its error stays with its owner
