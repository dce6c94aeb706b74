"""Watch mode in virtual time: pods going pending wake the provisioner after Karpenter's batching window.

The product's watch mode keeps an invocation open and waits on a wall-clock queue, which a virtual clock
cannot drive; an external watcher that invokes the planner would do the same job. Either way, what the
cluster sees is one provisioner pass per batch of newly provisionable pods: the batch closes when no new
pod arrived for ``idle`` seconds or ``max`` seconds after its first pod (Karpenter's batcher: 1 s, 10 s),
and the pass runs then. This module models that trigger generically, on the simulation's informer, and
hands each closed batch to an invocation callback (the runner queues the real provisioner handler as an
async Lambda invoke: one invocation at a time, later ones wait in the queue).

A pod counts when Karpenter's provisioner would act on it (``pod.IsProvisionable``), by the same test the
watcher function applies (``autoscaler.domain.provisionable``): not bound or nominated, not terminating,
not finished, kube-scheduler has marked it ``PodScheduled=False, reason=Unschedulable``, and neither a
mirror pod nor owned by a DaemonSet (the DaemonSet controller places those).
Each pod starts a batch once: its later status updates do not re-trigger a pass (the scheduled pass
every minute still sees it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from autoscaler.domain.batching import BATCH_IDLE_SECONDS, BATCH_MAX_SECONDS
from autoscaler.domain.provisionable import is_provisionable as provisionable
from simulator.kube_store import WatchEvent
from simulator.sim.engine import EventLoop

Invoke = Callable[[int], None]  # called with the batch's pod count when a batch closes


@dataclass
class WatchTrigger:
    """Batches newly provisionable pods in virtual time and calls ``invoke`` as each batch closes."""

    loop: EventLoop
    invoke: Invoke
    idle: float = BATCH_IDLE_SECONDS
    max: float = BATCH_MAX_SECONDS
    batches: int = 0
    _seen: set[str] = field(default_factory=set)
    _start: float | None = None
    _last: float = 0.0
    _size: int = 0

    def observe(self, event: WatchEvent) -> None:
        if event.plural != "pods" or event.type == "DELETED" or not provisionable(event.obj):
            return
        uid = str(event.obj["metadata"].get("uid") or event.obj["metadata"]["name"])
        if uid in self._seen:
            return
        self._seen.add(uid)
        now = self.loop.now
        if self._start is None:
            self._start, self._size = now, 0
            self.loop.at(now + self.idle, "watch batch", self._check)
        self._last = now
        self._size += 1

    def _check(self) -> None:
        """One event per batch: it re-arms itself at the window's current end until the window closes."""
        if self._start is None:
            return
        closes = min(self._last + self.idle, self._start + self.max)
        if self.loop.now < closes:
            self.loop.at(closes, "watch batch", self._check)
            return
        size, self._start = self._size, None
        self.batches += 1
        self.invoke(size)
