"""Watch mode in virtual time: pods going pending (and, with the watcher function, our nodes registering or
becoming Ready) wake the provisioner after Karpenter's batching window.

The product's watcher keeps an invocation open and waits on a wall-clock queue, which a virtual clock
cannot drive; what the cluster sees is one provisioner pass per batch: the batch closes when nothing new
arrived for ``idle`` seconds or ``max`` seconds after its first trigger (Karpenter's batcher: 1 s, 10 s),
and the pass runs then. This module models that trigger generically, on the simulation's informer, and
hands each closed batch (a ``WakeUp``) to an invocation callback (the runner queues the real provisioner
handler as an async Lambda invoke with the watcher's own payload: one invocation at a time, later ones wait
in the queue).

A pod counts when Karpenter's provisioner would act on it (``pkg/utils/pod.IsProvisionable``), written
here from that definition and not taken from the product: not bound or nominated, not terminating, not
finished, kube-scheduler has marked it ``PodScheduled=False, reason=Unschedulable``, and neither a mirror
pod (annotation ``kubernetes.io/config.mirror``, or owned by a Node) nor owned by a DaemonSet (the DaemonSet
controller places those).
Each pod starts a batch once: its later status updates do not re-trigger a pass (the scheduled pass
every minute still sees it).

With ``nodes`` (the watcher function's node stream, as docs/architecture.md specifies it), a node of ours
(``karpenter.sh/nodepool`` label) not yet initialised (no ``karpenter.sh/initialized`` label) wakes the
provisioner once when it carries ``karpenter.sh/unregistered`` and once when its Ready condition turns True;
it is forgotten when deleted or initialised. A wake-up names the newest pod
resourceVersion the watcher saw (of its batch's pods, else of any pod; the API server's resourceVersions
are integers): the pass's warm pod cache catches up to it, as deployed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from simulator.kube_store import WatchEvent
from simulator.sim.engine import EventLoop

# Karpenter's documented batching defaults (BATCH_IDLE_DURATION, BATCH_MAX_DURATION); the runner passes the
# cluster file's own window.
BATCH_IDLE_SECONDS = 1.0
BATCH_MAX_SECONDS = 10.0
REGISTERED, READY = "registered", "ready"
NODEPOOL_LABEL = "karpenter.sh/nodepool"
INITIALIZED_LABEL = "karpenter.sh/initialized"
UNREGISTERED_TAINT = "karpenter.sh/unregistered"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


def provisionable(pod: Mapping[str, Any]) -> bool:
    """Karpenter's ``IsProvisionable``: unscheduled, not preempting, failed to schedule, not a DaemonSet's
    or a Node's (mirror) pod; and alive (not terminal, not terminating)."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    if spec.get("nodeName") or status.get("nominatedNodeName") or meta.get("deletionTimestamp"):
        return False
    if status.get("phase") in ("Succeeded", "Failed") or MIRROR_ANNOTATION in (meta.get("annotations") or {}):
        return False
    if any(o.get("controller") and o.get("kind") in ("DaemonSet", "Node") for o in meta.get("ownerReferences") or ()):
        return False
    return any(c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"
               for c in status.get("conditions") or ())


def newest_version(a: str, b: str) -> str:
    """The later of two resourceVersions (integers on this API server); a non-integer one wins."""
    if not a or not b:
        return a or b
    if not (a.isdigit() and b.isdigit()):
        return b if not b.isdigit() else a
    return a if int(a) >= int(b) else b


def node_name(node: Mapping[str, Any]) -> str:
    return str((node.get("metadata") or {}).get("name") or "")


def awaits_initialization(node: Mapping[str, Any]) -> bool:
    labels = (node.get("metadata") or {}).get("labels") or {}
    return NODEPOOL_LABEL in labels and INITIALIZED_LABEL not in labels


def wake_reasons(node: Mapping[str, Any]) -> frozenset[str]:
    """``registered`` while the registration taint is on the node, ``ready`` once its Ready condition is True."""
    if not awaits_initialization(node):
        return frozenset()
    spec, status = node.get("spec") or {}, node.get("status") or {}
    reasons = set()
    if any(t.get("key") == UNREGISTERED_TAINT for t in spec.get("taints") or ()):
        reasons.add(REGISTERED)
    if any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or ()):
        reasons.add(READY)
    return frozenset(reasons)


@dataclass(frozen=True)
class WakeUp:
    """One closed batch: what the watcher's wake-up carries."""

    pods: int
    registered: int = 0
    ready: int = 0
    resource_version: str = ""

    @property
    def reason(self) -> str:
        parts = [f"{self.registered} node(s) registered" if self.registered else "",
                 f"{self.ready} node(s) ready" if self.ready else "",
                 f"{self.pods} pod(s) became unschedulable" if self.pods else ""]
        return ", ".join(p for p in parts if p)


Invoke = Callable[[WakeUp], None]  # called as each batch closes


@dataclass
class WatchTrigger:
    """Batches newly provisionable pods (and node triggers) in virtual time and calls ``invoke`` per batch."""

    loop: EventLoop
    invoke: Invoke
    idle: float = BATCH_IDLE_SECONDS
    max: float = BATCH_MAX_SECONDS
    nodes: bool = False  # the watcher function's node stream (reaction: watcher)
    batches: int = 0
    _seen: set[str] = field(default_factory=set)
    _woken_nodes: dict[str, frozenset[str]] = field(default_factory=dict)
    _pod_version: str = ""
    _start: float | None = None
    _last: float = 0.0
    _size: int = 0
    _registered: int = 0
    _ready: int = 0
    _batch_version: str = ""

    def observe(self, event: WatchEvent) -> None:
        if event.plural == "nodes" and self.nodes:
            self._observe_node(event)
            return
        if event.plural != "pods":
            return
        version = str(event.obj.get("metadata", {}).get("resourceVersion") or "")
        self._pod_version = newest_version(self._pod_version, version)
        if event.type == "DELETED" or not provisionable(event.obj):
            return
        uid = str(event.obj["metadata"].get("uid") or event.obj["metadata"]["name"])
        if uid in self._seen:
            return
        self._seen.add(uid)
        self._arrived()
        self._size += 1
        self._batch_version = newest_version(self._batch_version, version)

    def _observe_node(self, event: WatchEvent) -> None:
        name = node_name(event.obj)
        if event.type == "DELETED" or not awaits_initialization(event.obj):
            self._woken_nodes.pop(name, None)
            return
        before = self._woken_nodes.get(name, frozenset())
        reasons = wake_reasons(event.obj)
        self._woken_nodes[name] = before | reasons
        fresh = reasons - before
        if not fresh:
            return
        self._arrived()
        self._registered += REGISTERED in fresh
        self._ready += READY in fresh

    def _arrived(self) -> None:
        now = self.loop.now
        if self._start is None:
            self._start, self._size, self._registered, self._ready, self._batch_version = now, 0, 0, 0, ""
            self.loop.at(now + self.idle, "watch batch", self._check)
        self._last = now

    def _check(self) -> None:
        """One event per batch: it re-arms itself at the window's current end until the window closes."""
        if self._start is None:
            return
        closes = min(self._last + self.idle, self._start + self.max)
        if self.loop.now < closes:
            self.loop.at(closes, "watch batch", self._check)
            return
        self._start = None
        self.batches += 1
        self.invoke(WakeUp(pods=self._size, registered=self._registered, ready=self._ready,
                           resource_version=self._batch_version or self._pod_version))
