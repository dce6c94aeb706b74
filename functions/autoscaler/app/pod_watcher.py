"""The watcher function's service: keep a list+watch of unbound pods open, remember which are
provisionable (Karpenter's test, ``domain/provisionable.py``), and wake the provisioner once per batch of
pods that newly became provisionable (Karpenter's batching window: 1 s idle, 10 s max).

State is the set of provisionable pod keys and the last resourceVersion: memory grows with the pods
waiting for capacity, never with the cluster. It lives in the service, which the handler keeps for the
container's life, so a warm invocation resumes the watch where the previous one stopped instead of
listing again. A stream that ends or drops resumes from the last resourceVersion; 410 Gone lists again;
other errors back off (1 s doubling to 30 s) with one log line each. A daemon thread reads the stream
into a queue so the batching window is timed even while the stream is silent.

With a node watch (``nodes``), a second daemon thread lists and watches our nodes waiting for
initialisation (``domain/node_wake.py``) into the same queue: a node that registers (the unregistered
taint) or becomes Ready wakes the provisioner through the same batching window, once per (node, reason)
while the container is warm, so its lifecycle sweep registers and initialises the node within seconds
instead of at the next safety pass. State: the reasons already woken for, per node in that selection.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from autoscaler.app.ports import (
    Clock,
    CloudError,
    ClusterError,
    ProvisionerWaker,
    UnboundPodWatch,
    UninitializedNodeWatch,
)
from autoscaler.domain.batching import BATCH_IDLE_SECONDS, BATCH_MAX_SECONDS
from autoscaler.domain.node_wake import READY, REGISTERED, awaits_initialization, created_at, node_name, wake_reasons
from autoscaler.domain.provisionable import is_provisionable, pod_key, unschedulable_since

log = logging.getLogger("autoscaler.app.pod_watcher")


@dataclass(frozen=True)
class WatcherSettings:
    batch_idle: float = BATCH_IDLE_SECONDS
    batch_max: float = BATCH_MAX_SECONDS
    backoff_base: float = 1.0
    backoff_max: float = 30.0
    # A list (a cold container, or after 410 Gone) wakes only for pods marked Unschedulable (nodes created)
    # this recently: older ones were seen by the watcher run before this one (the runs alternate between two
    # containers, each with its own memory), and the provisioner's safety pass serves any it missed; a node
    # stuck uninitialised (a startup taint never removed) does not wake every run.
    list_recent_seconds: float = 900.0


@dataclass
class WatchRun:
    """What one ``run`` did: for the handler's one log line and its error signal."""

    wakes: int = 0
    woken_pods: int = 0
    woken_nodes: int = 0  # (node, reason) triggers carried by the wake-ups
    events: int = 0
    lists: int = 0
    errors: int = 0
    connected: bool = False  # a list or a watch stream of pods succeeded at least once (the node stream is extra)
    wake_failures: int = 0


# Items the reader threads hand the batching loop: (stream, "list" or event type, objects, resourceVersion).
PODS, NODES = "pods", "nodes"
_List = tuple[str, str, list[Any], str]  # pods: ListedPod; nodes: raw JSON
_Event = tuple[str, str, dict[str, Any], str]
_Lister = Callable[[], tuple[list[Any], str]]
_Watcher = Callable[..., Iterator[dict[str, Any]]]
_WHAT = {PODS: "unbound pods", NODES: "uninitialised nodes"}


@dataclass(frozen=True)
class _New:
    """What one item newly calls for: pods that became provisionable, nodes registered, nodes ready."""

    pods: int = 0
    registered: int = 0
    ready: int = 0

    def __bool__(self) -> bool:
        return bool(self.pods or self.registered or self.ready)


@dataclass
class _Batch:
    first: float
    last: float
    pods: int = 0
    registered: int = 0
    ready: int = 0
    version: str = ""  # the newest resourceVersion among its pods: the pass's view must include it

    def add(self, *, now: float, new: _New, version: str) -> None:
        self.last = now
        self.pods, self.registered, self.ready = (self.pods + new.pods, self.registered + new.registered,
                                                  self.ready + new.ready)
        if new.pods:
            self.version = newest_version(self.version, version)

    def reason(self) -> str:
        parts = [f"{self.registered} node(s) registered" if self.registered else "",
                 f"{self.ready} node(s) ready" if self.ready else "",
                 f"{self.pods} pod(s) became unschedulable" if self.pods else ""]
        return ", ".join(p for p in parts if p)


def _version_of(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


@dataclass(frozen=True, slots=True)
class ListedPod:
    """What the watcher keeps of a listed pod: each page of a 50,000-pod list is reduced to these as it is
    read (the raw pods would not fit the 128 MB function)."""

    key: str
    version: str
    provisionable: bool
    since: float | None  # when it became unschedulable (``unschedulable_since``)


def listed_pod(pod: dict[str, Any]) -> ListedPod:
    provisionable = is_provisionable(pod)
    return ListedPod(key=pod_key(pod), version=_version_of(pod), provisionable=provisionable,
                     since=unschedulable_since(pod) if provisionable else None)


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
    # The newest version of a pod object applied: a node-only wake-up names it (a list's version, or a
    # node's, is no pod's: the provisioner's pod cache might never reach it).
    pod_version: str = ""
    nodes: UninitializedNodeWatch | None = None
    woken_nodes: dict[str, frozenset[str]] = field(default_factory=dict)  # node -> reasons already woken for
    node_resource_version: str = ""

    def run(self, *, until: float) -> WatchRun:
        """Watch until the monotonic time ``until``; a batch still open then is woken for at once."""
        report = WatchRun()
        items: queue.Queue[_List | _Event | None] = queue.Queue()
        stop = threading.Event()
        streams: list[tuple[str, _Lister, _Watcher, str]] = [
            (PODS, self._list_pods, self.pods.watch_unbound_pods_raw, self.resource_version)]
        if self.nodes is not None:
            streams.append((NODES, self.nodes.list_uninitialized_nodes_raw, self.nodes.watch_uninitialized_nodes_raw,
                            self.node_resource_version))
        for name, lister, watcher, version in streams:
            threading.Thread(target=self._read, args=(items, stop, until, report),
                             kwargs={"stream": name, "lister": lister, "watcher": watcher, "version": version},
                             name=f"{name}-watch", daemon=True).start()
        running = len(streams)
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
                    running -= 1
                    if not running:
                        break
                    continue
                new = self._apply(item, report) if item[0] == PODS else self._apply_node(item, report)
                if new:
                    now = self.clock.monotonic()
                    batch = batch or _Batch(first=now, last=now)
                    batch.add(now=now, new=new, version=item[3])
        finally:
            stop.set()
            if batch is not None:
                self._wake(batch, report)
        return report

    def _apply(self, item: _List | _Event, report: WatchRun) -> _New:
        """Update the pod state; how many pods became provisionable."""
        _, kind, payload, version = item
        if kind == "list":
            assert isinstance(payload, list)
            listed = {p.key: p for p in payload if p.provisionable}
            oldest = self.clock.now() - self.settings.list_recent_seconds
            new = sum(1 for key, pod in listed.items() if key not in self.provisionable
                      and (pod.since or oldest) >= oldest)
            self.provisionable, self.resource_version = set(listed), version
            for pod in payload:
                self.pod_version = newest_version(self.pod_version, pod.version)
            return _New(pods=new)
        assert isinstance(payload, dict)
        report.events += 1
        self.resource_version = version or self.resource_version
        if kind not in ("ADDED", "MODIFIED", "DELETED"):
            return _New()  # BOOKMARK: only the version moves
        self.pod_version = newest_version(self.pod_version, _version_of(payload))
        key = pod_key(payload)
        if kind != "DELETED" and is_provisionable(payload):
            if key in self.provisionable:
                return _New()  # a status update of a pod already woken for: no new pass needed
            self.provisionable.add(key)
            return _New(pods=1)
        self.provisionable.discard(key)
        return _New()

    def _apply_node(self, item: _List | _Event, report: WatchRun) -> _New:
        """Update the node state; which (node, reason) triggers are new. A list keeps what was woken for
        the nodes still listed, forgets the rest, and wakes only for nodes created recently."""
        _, kind, payload, version = item
        if kind == "list":
            assert isinstance(payload, list)
            oldest = self.clock.now() - self.settings.list_recent_seconds
            woken: dict[str, frozenset[str]] = {}
            registered = ready = 0
            for node in payload:
                if not awaits_initialization(node):
                    continue
                name, reasons = node_name(node), wake_reasons(node)
                before = self.woken_nodes.get(name, frozenset())
                woken[name] = before | reasons
                if (created_at(node) or oldest) >= oldest:
                    registered += REGISTERED in reasons - before
                    ready += READY in reasons - before
            self.woken_nodes, self.node_resource_version = woken, version
            return _New(registered=registered, ready=ready)
        assert isinstance(payload, dict)
        report.events += 1
        self.node_resource_version = version or self.node_resource_version
        if kind not in ("ADDED", "MODIFIED", "DELETED"):
            return _New()
        name = node_name(payload)
        if kind == "DELETED" or not awaits_initialization(payload):
            self.woken_nodes.pop(name, None)  # gone, or initialised: it left the selection
            return _New()
        before = self.woken_nodes.get(name, frozenset())
        reasons = wake_reasons(payload)
        self.woken_nodes[name] = before | reasons
        fresh = reasons - before  # a heartbeat of a node already woken for adds nothing
        return _New(registered=int(REGISTERED in fresh), ready=int(READY in fresh))

    def _wake(self, batch: _Batch, report: WatchRun) -> None:
        reason = batch.reason()
        # Only a pod version: the pass's pod cache catches up to it (a node's version is no pod version and
        # pods might never reach it). A node-only batch carries the newest pod object's version, if any.
        version = batch.version or self.pod_version
        try:
            self.waker.wake(reason=reason, pods=batch.pods, resource_version=version)
        except CloudError as exc:
            # The safety pass still serves these pods; an alarm on the provisioner's heartbeat covers more.
            report.wake_failures += 1
            log.error("could not wake the provisioner (%s): %s", reason, exc)
            return
        report.wakes += 1
        report.woken_pods += batch.pods
        report.woken_nodes += batch.registered + batch.ready
        log.info("woke the provisioner: %s", reason)

    def _list_pods(self) -> tuple[list[ListedPod], str]:
        return self.pods.list_unbound_pods(listed_pod)

    def _read(self, items: queue.Queue[_List | _Event | None], stop: threading.Event, until: float,
              report: WatchRun, *, stream: str, lister: _Lister, watcher: _Watcher, version: str) -> None:
        """A reader thread: list when there is no version (or it expired), watch, resume, back off."""
        failures = 0
        try:
            while not stop.is_set() and (left := until - self.clock.monotonic()) > 0:
                if failures:
                    wait = min(self.settings.backoff_max, self.settings.backoff_base * 2 ** (failures - 1), left)
                    if stop.wait(wait):
                        return
                try:
                    if not version:
                        listed, version = lister()
                        report.lists += 1
                        report.connected = report.connected or stream == PODS
                        items.put((stream, "list", listed, version))
                        continue
                    for event in watcher(resource_version=version, timeout_seconds=left):
                        report.connected = report.connected or stream == PODS
                        failures = 0
                        obj = event.get("object") or {}
                        version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                        items.put((stream, str(event.get("type")), obj, version))
                        if stop.is_set():
                            return
                except ClusterError as exc:
                    if exc.status == 410:
                        log.info("watch version %s expired (410 Gone): listing %s again", version, _WHAT[stream])
                        version = ""
                        continue
                    failures += 1
                    report.errors += 1
                    log.warning("%s watch failed (attempt %d, next try in %.0f s): %s", _WHAT[stream], failures,
                                min(self.settings.backoff_max, self.settings.backoff_base * 2 ** (failures - 1)),
                                exc)
        finally:
            items.put(None)
