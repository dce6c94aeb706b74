"""Draining a node through the Eviction API, in Karpenter's order, up to a deadline.

Mirror (static) pods, DaemonSet pods and finished pods are left alone: the kubelet or the DaemonSet
controller owns them and they hold no work to move. The rest are evicted in two waves: non-critical
pods first, then pods of the ``system-cluster-critical`` / ``system-node-critical`` priority classes,
so that cluster services (DNS, CNI helpers) keep running while workloads move. A wave starts only
when the previous wave's pods are gone. Each pod keeps its own termination grace period; the drain
waits for pods to disappear and stops at the deadline, reporting every pod it could not remove and
why. Calling ``drain`` again on a partly drained node simply continues.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from autoscaler.app.ports import Clock, ClusterPort
from autoscaler.domain.models import Pod

CRITICAL_PRIORITY_CLASSES = frozenset({"system-cluster-critical", "system-node-critical"})

NotEvictedReason = Literal["pdb", "error", "timeout", "localData"]


@dataclass(frozen=True, slots=True)
class DrainOptions:
    """NTH's drain switches, per cluster (the ``interruption`` section of the cluster file).
    ``grace_seconds``: every eviction's grace period (None keeps each pod's own);
    ``delete_local_data``: evict pods with emptyDir volumes (False leaves them, and the drain incomplete,
    as ``kubectl drain`` without ``--delete-emptydir-data``); ``delete_finished``: delete Succeeded /
    Failed pods left on the node (they hold no work, but keep their logs and the Node's pod list)."""

    grace_seconds: int | None = None
    delete_local_data: bool = True
    delete_finished: bool = False


@dataclass(frozen=True, slots=True)
class NotEvicted:
    """A pod still on the node when the drain stopped. ``reason``: ``pdb`` (a PodDisruptionBudget
    kept refusing), ``error`` (the API refused for another reason), ``timeout`` (evicted or
    terminating, but still there at the deadline, or never reached)."""

    pod: str
    reason: NotEvictedReason
    message: str = ""


@dataclass(frozen=True, slots=True)
class DrainResult:
    node: str
    evicted: tuple[str, ...] = ()  # eviction accepted by the API server during this call
    skipped: tuple[tuple[str, str], ...] = ()  # (pod, why): mirror, daemonset, finished
    not_evicted: tuple[NotEvicted, ...] = ()
    blocked: int = 0  # eviction attempts a PodDisruptionBudget refused
    throttled: int = 0  # eviction attempts refused by API throttling or a server error (not PDBs)

    @property
    def complete(self) -> bool:
        """True when nothing that needed evicting is left on the node."""
        return not self.not_evicted


def is_critical(pod: Pod) -> bool:
    return pod.priority_class_name in CRITICAL_PRIORITY_CLASSES


def skip_reason(pod: Pod) -> str | None:
    """Why drain leaves this pod in place, or None when it must be evicted."""
    if pod.is_mirror:
        return "mirror pod"
    if pod.is_daemonset_pod:
        return "daemonset pod"
    if pod.is_finished:
        return f"finished ({pod.phase})"
    return None


@dataclass
class _Progress:
    evicted: list[str] = field(default_factory=list)
    blocked: int = 0  # eviction attempts a PodDisruptionBudget refused
    throttled: int = 0  # eviction attempts refused by API throttling (429) or a server error
    failures: dict[str, NotEvicted] = field(default_factory=dict)


def drain(node_name: str, *, cluster: ClusterPort, clock: Clock, deadline: float,
          sleep: Callable[[float], None] | None = None, poll_interval: float = 1.0,
          retry_interval: float = 5.0, options: DrainOptions | None = None) -> DrainResult:
    """Evict every pod that must move off ``node_name`` by ``deadline`` (a ``clock.monotonic()``
    reading). PDB-blocked pods are retried every ``retry_interval`` seconds until the deadline;
    pods being deleted are polled every ``poll_interval`` seconds until gone."""
    sleep = sleep or clock.sleep
    opts = options or DrainOptions()
    progress = _Progress()
    skipped: dict[str, str] = {}
    if opts.delete_finished:
        for pod in cluster.pods(node_name=node_name):
            if pod.is_finished and not pod.is_mirror:
                cluster.delete_pod(pod.namespace, pod.name)
    for critical in (False, True):
        wave = _wave(cluster.pods(node_name=node_name), critical=critical, skipped=skipped)
        if not opts.delete_local_data:
            for pod in [p for p in wave if p.empty_dir]:
                wave.remove(pod)
                progress.failures[pod.key] = NotEvicted(pod.key, "localData", "has emptyDir data and "
                                                        "deleteLocalData is off")
        if not wave:
            continue
        if not _run_wave(wave, node_name=node_name, cluster=cluster, clock=clock, deadline=deadline,
                         sleep=sleep, poll_interval=poll_interval, retry_interval=retry_interval,
                         progress=progress, grace_seconds=opts.grace_seconds):
            # Later waves wait for this one; what they hold is reported as never reached.
            if not critical:
                for pod in _wave(cluster.pods(node_name=node_name), critical=True, skipped=skipped):
                    progress.failures.setdefault(pod.key, NotEvicted(
                        pod.key, "timeout", "not reached: non-critical pods were still on the node"))
            break
    return DrainResult(node=node_name, evicted=tuple(progress.evicted),
                       skipped=tuple(sorted(skipped.items())),
                       not_evicted=tuple(progress.failures[k] for k in sorted(progress.failures)),
                       blocked=progress.blocked, throttled=progress.throttled)


def _wave(pods: list[Pod], *, critical: bool, skipped: dict[str, str]) -> list[Pod]:
    out = []
    for pod in pods:
        why = skip_reason(pod)
        if why is not None:
            skipped[pod.key] = why
        elif is_critical(pod) == critical:
            out.append(pod)
    return sorted(out, key=lambda p: p.key)


def _run_wave(wave: list[Pod], *, node_name: str, cluster: ClusterPort, clock: Clock, deadline: float,
              sleep: Callable[[float], None], poll_interval: float, retry_interval: float,
              progress: _Progress, grace_seconds: int | None = None) -> bool:
    """Evict and wait for one wave; True when all its pods are gone before the deadline."""
    to_evict = {p.key: p for p in wave if not p.deleting}  # deleting pods only need waiting for
    pending = {p.key: p for p in wave}
    last_messages: dict[str, NotEvicted] = {}
    next_try = clock.monotonic()
    while True:
        now = clock.monotonic()
        if to_evict and now >= next_try:
            for key, pod in list(to_evict.items()):
                if clock.monotonic() >= deadline:
                    break  # a long sweep (hundreds of pods, a slow API) must not run past the deadline
                # A PDB refusal gets one attempt (this loop owns that retry cadence, so one PDB-blocked
                # pod cannot starve the others); throttling and 5xx are retried with backoff, for at
                # most one retry interval.
                result = cluster.evict(pod.namespace, pod.name, uid=pod.uid or None, retry_blocked=False,
                                       deadline=min(deadline, clock.monotonic() + retry_interval),
                                       grace_seconds=grace_seconds)
                progress.throttled += result.throttled_attempts
                if result.ok:
                    del to_evict[key]
                    last_messages.pop(key, None)
                    if result.outcome == "evicted":
                        progress.evicted.append(key)
                else:
                    if result.outcome == "blocked":
                        progress.blocked += 1
                    reason: NotEvictedReason = "pdb" if result.outcome == "blocked" else "error"
                    last_messages[key] = NotEvicted(key, reason, result.message)
            next_try = clock.monotonic() + retry_interval
        on_node = {p.key: p for p in cluster.pods(node_name=node_name)}
        wall = clock.now()
        for key in list(pending):
            current = on_node.get(key)
            # A pod stuck terminating (its kubelet gone) never leaves by itself; Karpenter's drain stops
            # waiting for it too, so a dead node's drain ends instead of holding the node until the timeout.
            if (current is None or (pending[key].uid and current.uid != pending[key].uid)
                    or current.stuck_terminating(wall)):
                del pending[key]
                to_evict.pop(key, None)
                last_messages.pop(key, None)
        if not pending:
            return True
        now = clock.monotonic()
        if now >= deadline:
            for key, pod in pending.items():
                progress.failures[key] = last_messages.get(key) or NotEvicted(
                    key, "timeout", f"still terminating at the deadline (grace period "
                                    f"{pod.termination_grace_seconds}s)")
            return False
        wait = min(poll_interval, deadline - now)
        if to_evict:
            wait = min(wait, max(next_try - now, 0.0))
        if wait > 0:
            sleep(wait)
