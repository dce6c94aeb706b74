"""Lambda execution environments for simulated invocations that run side by side in virtual time.

In AWS two concurrent invocations of a function never share a process: each runs in its own execution
environment with its own module globals and warm caches. The simulation runs every function in one
process, and since invocations are now cooperative tasks (``sim/engine.py``) that take turns, each turn
must see its own environment's state:

- the runtime's warm cluster cache (``LocalCluster.invoke`` installs a function's cache on the shared
  runtime for the invocation): saved when a task parks, put back when it resumes;
- the provisioner's launch pool: a ``SimExecutor`` per pass, its group launches tasks of the invocation;
- the interruption handler's per-container globals: its ``BatchProcessor`` (which keeps the batch's
  records and failures between calls) and its two pools, replaced by ``SimExecutor``s so drains and
  message workers are tasks of the invocation (the stand-in's own pools are restored by ``close``).

An invocation takes an idle environment of its function or a new one (a cold start) and returns it
when it ends, so environments are reused in a fixed order.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import autoscaler.app.provisioner as provisioner_module
import autoscaler.handlers.interruption as interruption_module
from simulator.sim.engine import EventLoop
from simulator.sim.tasks import SimExecutor, Task


@dataclass(eq=False)
class Container:
    function: str
    number: int
    state: dict[str, Any] = field(default_factory=dict)  # module globals of this environment
    cluster: Any = None  # the cluster adapter whose cache the invocation uses
    cache: Any = None
    saved: bool = False


class Containers:
    """Execution environments per function; installs the running task's environment on every turn."""

    def __init__(self, loop: EventLoop, cluster: Callable[[], Any]) -> None:
        self.loop, self._cluster = loop, cluster
        self._idle: dict[str, list[Container]] = {}
        self.started: dict[str, int] = {}  # environments created per function (cold starts)
        self._originals = {name: getattr(interruption_module, name)
                           for name in ("processor", "_node_pool", "_message_pool")}
        loop.on_resume = self._resume
        loop.on_park = self._park
        # The provisioner launches its groups on a pool of threads: as tasks here, so the CreateFleet calls
        # take turns in a fixed order (real threads would race for moto's ids and the claims table).
        self._launch_pool = provisioner_module.ThreadPoolExecutor
        self._launches = 0
        provisioner_module.ThreadPoolExecutor = self._launch_executor  # type: ignore[misc,assignment]

    def _launch_executor(self, max_workers: int, **_: Any) -> SimExecutor:
        self._launches += 1
        return SimExecutor(self.loop, max_workers=max_workers, name=f"launch-{self._launches}")

    @contextlib.contextmanager
    def enter(self, function: str) -> Iterator[Container]:
        """Run the calling invocation (a task) in an idle environment of ``function``, or a new one."""
        task = self.loop.current()
        idle = self._idle.setdefault(function, [])
        container = idle.pop(0) if idle else self._new(function)
        container.cluster, container.saved = self._cluster(), False
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
        """Put the interruption handler's own globals back (the simulation is over)."""
        for name, value in self._originals.items():
            setattr(interruption_module, name, value)
        provisioner_module.ThreadPoolExecutor = self._launch_pool  # type: ignore[misc]

    def _new(self, function: str) -> Container:
        """A cold start: the interruption handler's globals built as its module builds them (same
        processor settings, pools with the same worker bounds, as tasks)."""
        number = self.started[function] = self.started.get(function, 0) + 1
        state: dict[str, Any] = {}
        if function == "interruption":
            p, nodes, messages = (self._originals[n] for n in ("processor", "_node_pool", "_message_pool"))
            state = {"processor": type(p)(event_type=p.event_type, model=p.model,
                                          raise_on_entire_batch_failure=p.raise_on_entire_batch_failure),
                     "_node_pool": SimExecutor(self.loop, max_workers=nodes._max_workers,
                                               name=f"drain-{number}"),
                     "_message_pool": SimExecutor(self.loop, max_workers=messages._max_workers,
                                                  name=f"message-{number}")}
        return Container(function, number, state)

    @staticmethod
    def _install(container: Container) -> None:
        for name, value in container.state.items():
            setattr(interruption_module, name, value)

    def _resume(self, task: Task) -> None:
        container = task.invocation.context
        if isinstance(container, Container):
            if container.saved:
                container.cluster.cache = container.cache
            self._install(container)

    def _park(self, task: Task) -> None:
        container = task.invocation.context
        if isinstance(container, Container):
            container.cache, container.saved = container.cluster.cache, True
