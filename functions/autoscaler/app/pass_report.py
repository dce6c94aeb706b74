"""What one provisioner pass did, as the decision log line, the handler's JSON and the metrics read
it: the planned node groups, what EC2 actually launched (type, zone, capacity type, price) and what
failed or stayed unschedulable."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from autoscaler.app.claims import Reconciled
from autoscaler.app.lifecycle import LifecycleResult
from autoscaler.domain.fleet import FleetError, LaunchedInstance
from autoscaler.domain.plan import Launch, Plan, Unschedulable

# Bounds on what one pass writes to its log line and JSON (a 50k-pod pass must stay far below
# CloudWatch's 256 KB per log event and X-Ray's segment size).
LOG_GROUPS = 12
LOG_CLAIMS = 8
JSON_ITEMS = 200


class LaunchFailureKind(StrEnum):
    """Why a planned node group was not sent to EC2, or its request raised (EC2's own per-offering answers
    are ``GroupOutcome.errors``). The value is the ``LaunchFailures`` metric's ``Reason``."""

    CONFIG = "ConfigError"  # the NodePool / EC2NodeClass resolves to nothing launchable; nothing was sent
    BLOCKED = "not launched"  # the pass may not launch (no lease, no claim store): planned again next pass
    DEFERRED = "Deferred"  # the invocation is ending: left to the next pass
    CLAIM_STORE = "ClaimStoreUnavailable"  # the node claims could not be recorded, so nothing was launched
    ERROR = "LaunchError"  # the launch raised; EC2 may have acted, so the claims stay for the next pass


@dataclass(frozen=True, slots=True)
class LaunchFailure:
    """A group's failure: its kind and the detail a person reads. ``code``: for ``ERROR``, the AWS error code
    or the exception's class, which the metric counts instead of the kind."""

    kind: LaunchFailureKind
    detail: str
    code: str = ""

    @property
    def reason(self) -> str:
        """The ``LaunchFailures`` metric's ``Reason``."""
        return self.code or self.kind.value

    def __str__(self) -> str:
        return f"{self.reason}: {self.detail}"


@dataclass
class GroupOutcome:
    """One CreateFleet request: ``count`` identical planned nodes."""

    claim_id: str
    launch: Launch
    count: int
    pods: tuple[str, ...]
    launched: list[LaunchedInstance] = field(default_factory=list)
    errors: list[FleetError] = field(default_factory=list)
    failure: LaunchFailure | None = None  # not sent, or the request raised
    # USD/hour of each launched instance's actual offering (type, zone, capacity type EC2 chose)
    prices: dict[str, float] = field(default_factory=dict)
    # pod key -> the launched instance it was planned onto (set once instances are known)
    placed: dict[str, LaunchedInstance] = field(default_factory=dict)

    @property
    def missing(self) -> int:
        return max(0, self.count - len(self.launched))


@dataclass
class PassResult:
    reason: str
    dry_run: bool
    plan: Plan
    groups: list[GroupOutcome] = field(default_factory=list)
    lifecycle: LifecycleResult | None = None
    blocked: str = ""  # why this pass could not launch (another pass holds the lease; no claim store)
    claims: Reconciled = field(default_factory=Reconciled)  # what the stored node claims came to
    events_failed: int = 0  # Kubernetes Events that could not be recorded (the pass went on)
    events_suppressed: int = 0  # pod Events the rate limit left out (the decision log has those pods)
    seconds: float = 0.0
    started_at: float = 0.0  # the clock's monotonic reading when the pass began

    @property
    def launched(self) -> list[LaunchedInstance]:
        return [i for g in self.groups for i in g.launched]

    @property
    def unschedulable(self) -> list[Unschedulable]:
        return self.plan.unschedulable

    @property
    def failures(self) -> list[str]:
        out = []
        for g in self.groups:
            if g.failure:
                out.append(f"{g.claim_id}: {g.failure}")
            elif g.missing:
                codes = ", ".join(sorted({e.code for e in g.errors})) or "no reason given"
                out.append(f"{g.claim_id}: {g.missing} of {g.count} node(s) not launched ({codes})")
        return out

    def summary(self) -> str:
        """The one-line decision log: what was seen, decided, launched and left."""
        p = self.plan
        head = f"{self.reason} pass: {p.pending_pods} pending pod(s)"
        parts = []
        if p.existing:
            parts.append(f"{len(p.existing)} fit existing or in-flight capacity")
        verb = "would launch" if self.dry_run else "launched"
        nodes = []
        for g in self.groups[:LOG_GROUPS]:
            types = ", ".join(g.launch.instance_types[:3]) + ("..." if len(g.launch.instance_types) > 3 else "")
            if g.launched:
                # What EC2 actually launched (a spot plan may have fallen back to on-demand), at its price.
                got = "/".join(sorted({f"{i.instance_type} {i.zone} {i.capacity_type} "
                                       f"${g.prices.get(i.instance_id, 0.0):.4f}/h" for i in g.launched}))
                claims = ", ".join(i.claim_id for i in g.launched[:LOG_CLAIMS])  # one node claim per instance
                claims += f", +{len(g.launched) - LOG_CLAIMS}" if len(g.launched) > LOG_CLAIMS else ""
                nodes.append(f"{len(g.launched)}x {got} for {len(g.pods)} pod(s) ({claims})")
            else:
                nodes.append(f"{g.count}x [{types}] {g.launch.capacity_type} ${g.launch.hourly_price:.4f}/h for "
                             f"{len(g.pods)} pod(s) ({g.claim_id})")
        if len(self.groups) > LOG_GROUPS:
            nodes.append(f"and {len(self.groups) - LOG_GROUPS} more group(s)")
        if nodes:
            parts.append(f"{verb} {sum(len(g.launched) if not self.dry_run else g.count for g in self.groups)}"
                         f" node(s): " + "; ".join(nodes))
        if self.events_suppressed:
            parts.append(f"{self.events_suppressed} pod Event(s) left out by the rate limit")
        if self.blocked:
            parts.append(f"launching skipped: {self.blocked}")
        if self.failures:
            more = f"; and {len(self.failures) - LOG_GROUPS} more" if len(self.failures) > LOG_GROUPS else ""
            parts.append("failed: " + "; ".join(self.failures[:LOG_GROUPS]) + more)
        c = self.claims
        if c.adopted or c.resumed or c.errors:
            errors = f" ({'; '.join(c.errors)})" if c.errors else ""
            parts.append(f"node claims: {c.adopted} found by their tags, {len(c.resumed)} launched by resuming a "
                         f"launch a lost answer or a stopped pass left{errors}")
        if p.unschedulable:
            reasons = Counter(u.reason for u in p.unschedulable)
            parts.append(f"{len(p.unschedulable)} unschedulable: "
                         + "; ".join(f"{n} pod(s): {r}" for r, n in reasons.most_common(5)))
        if not parts:
            parts.append("nothing to do")
        if self.lifecycle is not None and self.lifecycle.changed:
            parts.append(f"lifecycle: {self.lifecycle.summary()}")
        return f"{head}: " + ", ".join(parts)

    def to_json(self) -> dict[str, object]:
        """The handler's answer and the decision log's detail, bounded (CloudWatch keeps 256 KB per
        event): lists stop at JSON_ITEMS entries; the counts are always whole."""
        launched = [(g, i) for g in self.groups for i in g.launched]
        return {
            "reason": self.reason, "dryRun": self.dry_run, "pendingPods": self.plan.pending_pods,
            "startedAt": round(self.started_at, 6), "seconds": round(self.seconds, 3),
            "nominated": len(self.plan.existing),
            "launched": [{"instanceId": i.instance_id, "instanceType": i.instance_type, "zone": i.zone,
                          "capacityType": i.capacity_type, "claim": i.claim_id,
                          "hourlyPrice": round(g.prices.get(i.instance_id, 0.0), 6)}
                         for g, i in launched[:JSON_ITEMS]],
            "launchedCount": len(launched),
            "planned": [{"claim": g.claim_id, "count": g.count, "nodePool": g.launch.node_pool,
                         "capacityType": g.launch.capacity_type, "instanceTypes": list(g.launch.instance_types[:10]),
                         "hourlyPrice": round(g.launch.hourly_price, 6), "pods": len(g.pods)}
                        for g in self.groups[:JSON_ITEMS]],
            "failures": self.failures[:JSON_ITEMS], "blocked": self.blocked,
            "eventsSuppressed": self.events_suppressed, "eventsFailed": self.events_failed,
            "claims": {"adopted": self.claims.adopted, "finished": self.claims.finished,
                       "resumed": [i.instance_id for i in self.claims.resumed[:JSON_ITEMS]],
                       "errors": self.claims.errors[:JSON_ITEMS]},
            "unschedulable": [{"pod": u.pod, "reason": u.reason} for u in self.plan.unschedulable[:JSON_ITEMS]],
            "unschedulableCount": len(self.plan.unschedulable),
            "summary": self.summary(),
        }


def _group_key(launch: Launch) -> tuple[object, ...]:
    return (launch.node_pool, launch.node_class, launch.capacity_type, launch.capacity_types, launch.zones,
            launch.instance_types, tuple(sorted(launch.fallback_instance_types.items())),
            tuple(sorted(launch.labels.items())), launch.taints, launch.startup_taints)


def group_launches(launches: Iterable[Launch]) -> list[list[Launch]]:
    """Identical planned nodes (same pool, offerings, labels, taints) go into one CreateFleet request."""
    groups: dict[tuple[object, ...], list[Launch]] = {}
    for launch in launches:
        groups.setdefault(_group_key(launch), []).append(launch)
    return list(groups.values())
