"""Kubernetes Events on pods (``kubectl describe pod``): where a pod will go (``Nominated``), why it
cannot (``FailedScheduling``) or why its node did not launch (``LaunchFailed``).

Bounded like Karpenter's event recorder: the same message for the same pod is sent once per
``DEDUPE_SECONDS``, and a token bucket (``RATE`` per second, ``BURST`` at once) caps how many go out, so
a 50,000-pod burst costs ~100 API calls rather than 50,000 (and not 50,000 Event objects in etcd).
Warnings go first; what the bucket leaves out is counted (the pass reports it) and its pods are still
in the decision log. Pods left out are not left silent either: their controller (the ReplicaSet, Job...
``kubectl describe`` shows) gets one summary Event per reason, e.g. ``Nominated: 9,800 pods of this
ReplicaSet ...`` (at most ``SUMMARIES`` per pass, the largest first). Sent on a small thread pool; a
failure to record is counted, never raised.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal

from autoscaler.app.ports import Clock, ClusterError, ClusterPort
from autoscaler.domain.models import ObjectRef, Pod

RATE = 10.0
BURST = 100.0
DEDUPE_SECONDS = 600.0
# Summary Events on the controllers of pods the bucket left out, per pass (beside the bucket's).
SUMMARIES = 10
log = logging.getLogger(__name__)
# A burst's ~100 Events at ~15 ms each: ~0.06 s on 32 threads (0.2 s on 8), a few requests per thread.
THREADS = 32


@dataclass(frozen=True, slots=True)
class PodEvent:
    pod: Pod
    reason: str
    message: str
    kind: Literal["Normal", "Warning"] = "Normal"


@dataclass(frozen=True, slots=True)
class Sent:
    sent: int = 0
    failed: int = 0
    suppressed: int = 0  # left out by the rate limit
    summaries: int = 0  # summary Events sent on the controllers of pods left out


class PodEvents:
    def __init__(self, cluster: ClusterPort, clock: Clock, *, rate: float = RATE, burst: float = BURST) -> None:
        self.cluster, self.clock = cluster, clock
        self.rate, self.burst = rate, burst
        self._tokens = burst
        self._refilled = clock.monotonic()
        # (pod uid or key, message) or (controller uid or key, reason) of a summary -> when sent
        self._seen: dict[tuple[str, str], float] = {}

    def _take(self, wanted: int) -> int:
        now = self.clock.monotonic()
        self._tokens = min(self.burst, self._tokens + (now - self._refilled) * self.rate)
        self._refilled = now
        granted = min(wanted, int(self._tokens))
        self._tokens -= granted
        return granted

    def send(self, events: Sequence[PodEvent]) -> Sent:
        now = self.clock.now()
        self._seen = {k: t for k, t in self._seen.items() if now - t < DEDUPE_SECONDS}
        fresh = [e for e in events if (e.pod.uid or e.pod.key, e.message) not in self._seen]
        fresh.sort(key=lambda e: e.kind != "Warning")  # stable: warnings first, then in the pass's order
        allowed = self._take(len(fresh))
        todo, left_out = fresh[:allowed], len(fresh) - allowed
        # One summary per controller and reason per DEDUPE_SECONDS, like the pods' own Events.
        summaries = [s for s in summarize(fresh[allowed:]) if s.key not in self._seen]
        if not todo and not summaries:
            return Sent(suppressed=left_out)

        errors: list[str] = []  # list.append is atomic: the threads share it

        def attempt(target: Pod | ObjectRef, reason: str, message: str, kind: Literal["Normal", "Warning"]) -> bool:
            try:
                return self.cluster.record_event(target, reason=reason, message=message, event_type=kind,
                                                 strict=True)
            except ClusterError as exc:
                errors.append(f"{reason} on {getattr(target, 'kind', 'Pod')} {target.namespace}/{target.name}: {exc}")
                return False

        def record(e: PodEvent) -> bool:
            ok = attempt(e.pod, e.reason, e.message, e.kind)
            if ok:
                self._seen[(e.pod.uid or e.pod.key, e.message)] = now
            return ok

        def record_summary(s: Summary) -> bool:
            ok = attempt(s.target, s.reason, s.message, s.kind)
            if ok:
                self._seen[s.key] = now
            return ok

        if len(todo) == 1 and not summaries:
            results = [record(todo[0])]
        else:
            with ThreadPoolExecutor(max_workers=THREADS) as pool:
                results = [*pool.map(record, todo), *pool.map(record_summary, summaries)]
        failed = results.count(False)
        if failed:
            # One line per pass, not one per Event: a missing RBAC verb would otherwise flood the log.
            log.warning("%d Kubernetes Events could not be recorded (the pass went on); first error: %s", failed,
                        errors[0] if errors else "refused")
        return Sent(sent=len(results) - failed, failed=failed, suppressed=left_out, summaries=len(summaries))


@dataclass(frozen=True, slots=True)
class Summary:
    target: ObjectRef
    reason: str
    message: str
    kind: Literal["Normal", "Warning"]

    @property
    def key(self) -> tuple[str, str]:
        t = self.target
        return (t.uid or f"{t.namespace}/{t.kind}/{t.name}", self.reason)


def summarize(left_out: Sequence[PodEvent], *, limit: int = SUMMARIES) -> list[Summary]:
    """One Event per (controller, reason) for the pods whose own Event the rate limit left out, the
    largest groups first, at most ``limit``. Pods without a controller are only counted."""
    groups: dict[tuple[str, str, str, str, str], list[PodEvent]] = {}
    for e in left_out:
        owner = e.pod.owner
        if owner is not None and owner.name:
            groups.setdefault((e.pod.namespace, owner.kind, owner.name, owner.uid, e.reason), []).append(e)
    out = []
    for (namespace, kind, name, uid, reason), events in sorted(groups.items(), key=lambda g: -len(g[1]))[:limit]:
        first, owner = events[0], events[0].pod.owner
        assert owner is not None
        noun = "pod" if len(events) == 1 else "pods"
        message = (f"{len(events):,} {noun} of this {kind} had no {reason} Event of their own (the provisioner "
                   f"rate-limits per-pod Events in a burst), e.g. pod {first.pod.name}: {first.message}")
        target = ObjectRef(api_version=owner.api_version, kind=kind, namespace=namespace, name=name, uid=uid)
        warning = any(e.kind == "Warning" for e in events)
        out.append(Summary(target, reason, message[:1024], "Warning" if warning else "Normal"))
    return out
