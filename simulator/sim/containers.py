"""Lambda execution environments for simulated invocations that run side by side in virtual time.

In AWS two concurrent invocations of a function never share a process: each runs in its own execution
environment with its own module globals and warm caches. The simulation runs every function in one
process, and since invocations are now cooperative tasks (``sim/engine.py``) that take turns, each turn
must see its own environment's state:

- the runtime's warm state (``handlers/runtime.WarmState``): its cluster cache (``LocalCluster.invoke``
  installs a function's cache on the shared runtime for the invocation) is saved when a task parks and put
  back when it resumes; its interruption pieces (Powertools' ``BatchProcessor``, which keeps the batch's
  records and failures between calls, and the drain pools) are the environment's own, with the pools
  replaced by ``SimExecutor``s so drains and message workers are tasks of the invocation;
- the provisioner's launch pool: a ``SimExecutor`` per pass, its group launches tasks of the invocation, so
  the CreateFleet calls take turns in a fixed order (real threads would race for moto's ids and the
  claims table, and a run would not repeat).

An invocation takes an idle environment of its function or a new one (a cold start) and returns it
when it ends, so environments are reused in a fixed order.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from autoscaler.app import provisioner as provisioner_module
from autoscaler.app.interruption_batch import DRAIN_WORKERS, MESSAGE_WORKERS, DrainPools
from autoscaler.handlers.interruption import batch_processor
from autoscaler.handlers.runtime import InterruptionWarm, Runtime
from simulator.sim.engine import EventLoop
from simulator.sim.tasks import SimExecutor, Task


@dataclass(eq=False)
class Container:
    function: str
    number: int
    interruption: InterruptionWarm | None = None  # this environment's interruption pieces
    runtime: Any = None  # the runtime whose warm cache the invocation uses
    cache: Any = None
    saved: bool = False


class Containers:
    """Execution environments per function; installs the running task's environment on every turn."""

    def __init__(self, loop: EventLoop, runtime: Callable[[], Runtime]) -> None:
        self.loop, self._runtime = loop, runtime
        self._idle: dict[str, list[Container]] = {}
        self.started: dict[str, int] = {}  # environments created per function (cold starts)
        self._installed: list[tuple[Runtime, InterruptionWarm | None]] = []
        loop.on_resume = self._resume
        loop.on_park = self._park
        self._launch_pool = provisioner_module.ThreadPoolExecutor
        self._launches = 0
        setattr(provisioner_module, "ThreadPoolExecutor", self._launch_executor)  # noqa: B010 - a stand-in

    def _launch_executor(self, max_workers: int, **_: Any) -> SimExecutor:
        self._launches += 1
        return SimExecutor(self.loop, max_workers=max_workers, name=f"launch-{self._launches}")

    @contextlib.contextmanager
    def enter(self, function: str) -> Iterator[Container]:
        """Run the calling invocation (a task) in an idle environment of ``function``, or a new one."""
        task = self.loop.current()
        idle = self._idle.setdefault(function, [])
        container = idle.pop(0) if idle else self._new(function)
        container.runtime, container.saved = self._runtime(), False
        if task is not None:
            task.invocation.context = container
        self._install(container)
        try:
            yield container
        finally:
            if task is not None:
                task.invocation.context = None
            idle.append(container)

    def close(self) -> None:
        """Put each runtime's own interruption pieces back (the simulation is over)."""
        for runtime, original in reversed(self._installed):
            runtime.warm.interruption = original
        self._installed.clear()
        setattr(provisioner_module, "ThreadPoolExecutor", self._launch_pool)  # noqa: B010

    def _new(self, function: str) -> Container:
        """A cold start: the interruption pieces built as the handler builds them (same processor settings,
        pools with the same worker bounds, as tasks)."""
        number = self.started[function] = self.started.get(function, 0) + 1
        interruption = None
        if function == "interruption":
            interruption = InterruptionWarm(
                processor=batch_processor(),
                pools=DrainPools(nodes=SimExecutor(self.loop, max_workers=DRAIN_WORKERS, name=f"drain-{number}"),
                                 messages=SimExecutor(self.loop, max_workers=MESSAGE_WORKERS,
                                                      name=f"message-{number}")))
        return Container(function, number, interruption)

    def _install(self, container: Container) -> None:
        if container.interruption is None:
            return
        runtime: Runtime = container.runtime
        if not any(r is runtime for r, _ in self._installed):
            self._installed.append((runtime, runtime.warm.interruption))
        runtime.warm.interruption = container.interruption

    def _resume(self, task: Task) -> None:
        container = task.invocation.context
        if isinstance(container, Container):
            if container.saved:
                container.runtime.use_cluster_cache(container.cache)
            self._install(container)

    def _park(self, task: Task) -> None:
        container = task.invocation.context
        if isinstance(container, Container):
            container.cache, container.saved = container.runtime.warm.cluster_cache, True
