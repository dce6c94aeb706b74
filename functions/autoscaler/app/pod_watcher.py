"""The watcher function's service: keep a list+watch of unbound pods open, remember which are
provisionable (Karpenter's test, ``domain/provisionable.py``), and wake the provisioner once per batch of
pods that newly became provisionable (Karpenter's batching window: 1 s idle, 10 s max).

State is the set of provisionable pod keys and the last resourceVersion: memory grows with the pods
waiting for capacity, never with the cluster. It lives in the service, which the handler keeps for the
container's life, so a warm invocation resumes the watch where the previous one stopped instead of
listing again. A stream that ends or drops resumes from the last resourceVersion; 410 Gone lists again;
other errors back off (1 s doubling to 30 s) with one log line each. A daemon thread reads the stream
into a queue so the batching window is timed even while the stream is silent.
"""

from __future__ import annotations

import logging
import queue
import threading
from dataclasses import dataclass, field
from typing import Any

from autoscaler.app.ports import Clock, CloudError, ClusterError, ProvisionerWaker, UnboundPodWatch
from autoscaler.domain.batching import BATCH_IDLE_SECONDS, BATCH_MAX_SECONDS
from autoscaler.domain.provisionable import is_provisionable, pod_key, unschedulable_since

log = logging.getLogger("autoscaler.app.pod_watcher")


@dataclass(frozen=True)
class WatcherSettings:
    batch_idle: float = BATCH_IDLE_SECONDS
    batch_max: float = BATCH_MAX_SECONDS
    backoff_base: float = 1.0
    backoff_max: float = 30.0
    # A list (a cold container, or after 410 Gone) wakes only for pods marked Unschedulable this recently:
    # older ones were seen by the watcher run before this one (the runs alternate between two containers,
    # each with its own memory), and the provisioner's safety pass serves any it missed.
    list_recent_seconds: float = 900.0


@dataclass
class WatchRun:
    """What one ``run`` did: for the handler's one log line and its error signal."""

    wakes: int = 0
    woken_pods: int = 0
    events: int = 0
    lists: int = 0
    errors: int = 0
    connected: bool = False  # a list or a watch stream succeeded at least once
    wake_failures: int = 0


# Items the reader thread hands the batching loop.
_List = tuple[str, list[dict[str, Any]], str]  # ("list", pods, resourceVersion)
_Event = tuple[str, dict[str, Any], str]  # (event type, pod, resourceVersion)


@dataclass
class _Batch:
    first: float
    last: float
    pods: int
    version: str  # the newest resourceVersion among its pods: the pass's view must include it

    def add(self, *, now: float, pods: int, version: str) -> None:
        self.last, self.pods = now, self.pods + pods
        self.version = newest_version(self.version, version)


def newest_version(a: str, b: str) -> str:
    """The later of two resourceVersions, compared as integers (the API server's are); one that is not an
    integer wins, so the provisioner lists instead of trusting an order it cannot check."""
    if not a or not b:
        return a or b
    if not (a.isdigit() and b.isdigit()):
        return b if not b.isdigit() else a
    return a if int(a) >= int(b) else b


@dataclass
class PendingPodWatcher:
    pods: UnboundPodWatch
    waker: ProvisionerWaker
    clock: Clock
    settings: WatcherSettings = field(default_factory=WatcherSettings)
    provisionable: set[str] = field(default_factory=set)
    resource_version: str = ""

    def run(self, *, until: float) -> WatchRun:
        """Watch until the monotonic time ``until``; a batch still open then is woken for at once."""
        report = WatchRun()
        items: queue.Queue[_List | _Event | None] = queue.Queue()
        stop = threading.Event()
        reader = threading.Thread(target=self._read, args=(items, stop, until, report, self.resource_version),
                                  name="unbound-pod-watch", daemon=True)
        reader.start()
        batch: _Batch | None = None
        try:
            while True:
                now = self.clock.monotonic()
                due = min(until, batch.last + self.settings.batch_idle, batch.first + self.settings.batch_max) \
                    if batch is not None else until
                if now >= due:
                    if batch is not None:
                        self._wake(batch, report)
                        batch = None
                    if now >= until:
                        break
                    continue
                try:
                    item = items.get(timeout=due - now)
                except queue.Empty:
                    continue
                if item is None:
                    break
                new = self._apply(item, report)
                if new:
                    now = self.clock.monotonic()
                    if batch is None:
                        batch = _Batch(first=now, last=now, pods=new, version=item[2])
                    else:
                        batch.add(now=now, pods=new, version=item[2])
        finally:
            stop.set()
            if batch is not None:
                self._wake(batch, report)
        return report

    def _apply(self, item: _List | _Event, report: WatchRun) -> int:
        """Update the state; how many pods became provisionable."""
        kind, payload, version = item
        if kind == "list":
            assert isinstance(payload, list)
            listed = {pod_key(p): p for p in payload if is_provisionable(p)}
            oldest = self.clock.now() - self.settings.list_recent_seconds
            new = sum(1 for key, pod in listed.items() if key not in self.provisionable
                      and (unschedulable_since(pod) or oldest) >= oldest)
            self.provisionable, self.resource_version = set(listed), version
            return new
        assert isinstance(payload, dict)
        report.events += 1
        self.resource_version = version or self.resource_version
        if kind not in ("ADDED", "MODIFIED", "DELETED"):
            return 0  # BOOKMARK: only the version moves
        key = pod_key(payload)
        if kind != "DELETED" and is_provisionable(payload):
            if key in self.provisionable:
                return 0  # a status update of a pod already woken for: no new pass needed
            self.provisionable.add(key)
            return 1
        self.provisionable.discard(key)
        return 0

    def _wake(self, batch: _Batch, report: WatchRun) -> None:
        reason = f"{batch.pods} pod(s) became unschedulable"
        try:
            self.waker.wake(reason=reason, pods=batch.pods, resource_version=batch.version)
        except CloudError as exc:
            # The safety pass still serves these pods; an alarm on the provisioner's heartbeat covers more.
            report.wake_failures += 1
            log.error("could not wake the provisioner for %d pod(s): %s", batch.pods, exc)
            return
        report.wakes += 1
        report.woken_pods += batch.pods
        log.info("woke the provisioner: %s", reason)

    def _read(self, items: queue.Queue[_List | _Event | None], stop: threading.Event, until: float,
              report: WatchRun, version: str) -> None:
        """The reader thread: list when there is no version (or it expired), watch, resume, back off."""
        failures = 0
        try:
            while not stop.is_set() and (left := until - self.clock.monotonic()) > 0:
                if failures:
                    wait = min(self.settings.backoff_max, self.settings.backoff_base * 2 ** (failures - 1), left)
                    if stop.wait(wait):
                        return
                try:
                    if not version:
                        pods, version = self.pods.list_unbound_pods_raw()
                        report.lists += 1
                        report.connected = True
                        items.put(("list", pods, version))
                        continue
                    for event in self.pods.watch_unbound_pods_raw(resource_version=version,
                                                                  timeout_seconds=left):
                        report.connected = True
                        failures = 0
                        obj = event.get("object") or {}
                        version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                        items.put((str(event.get("type")), obj, version))
                        if stop.is_set():
                            return
                except ClusterError as exc:
                    if exc.status == 410:
                        log.info("watch version %s expired (410 Gone): listing unbound pods again", version)
                        version = ""
                        continue
                    failures += 1
                    report.errors += 1
                    log.warning("unbound-pod watch failed (attempt %d, next try in %.0f s): %s", failures,
                                min(self.settings.backoff_max, self.settings.backoff_base * 2 ** (failures - 1)),
                                exc)
        finally:
            items.put(None)
