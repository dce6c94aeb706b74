"""What the interruption function does with one parsed EC2 event: find the affected nodes, taint and
cordon them at once, ask the provisioner for replacement capacity, drain them within the time the
invocation has, then terminate the instances this autoscaler owns and remove Node objects whose
instance is gone.

Every step is idempotent and its progress lives on the Node (taint, ``spec.unschedulable`` and the
``autoscaler.eks.aws/*`` annotations), never in memory: a message delivered twice, retried after a
drain ran out of time, or arriving out of order (a ``terminated`` state change before the spot warning)
continues where the cluster is, and a drain in progress is continued, never restarted.

The work is split in two so a batch of messages is cordoned before any of them is drained:
:meth:`InterruptionService.begin` (taint, cordon, annotate, replacement request; sub-second) and
:meth:`InterruptionService.handle` (``begin`` again, a no-op by then, followed by drain and cleanup).
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor, wait
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TYPE_CHECKING, TypeVar

from autoscaler.app.drain import DrainOptions, NotEvicted, drain
from autoscaler.app.drain_lease import DEFAULT_LEASE_SECONDS, DrainLease, DrainLeases
from autoscaler.app.node_state import NodeStates, NotOwnedError
from autoscaler.app.ports import CloudError, NotFoundError
from autoscaler.domain.fleet import CloudInstance
from autoscaler.domain.interruption import Action, EventKind, InterruptionEvent, LaunchHook, action_for, drain_deadline
from autoscaler.domain.keys import (
    CAPACITY_TYPE_LABEL,
    INSTANCE_TYPE_LABEL,
    KARPENTER_TERMINATION_FINALIZER,
    ZONE_LABEL,
)
from autoscaler.domain.models import DISRUPTED_TAINT, REBALANCE_TAINT, Node
from autoscaler.domain.node_state import Owner, read_state, request_replacement
from autoscaler.domain.ownership import is_owned

if TYPE_CHECKING:
    from autoscaler.app.ports import Clock, CloudPort, ClusterPort, LifecycleHooks, ReplacementRequester

log = logging.getLogger(__name__)

_T = TypeVar("_T")
_R = TypeVar("_R")

# A replacement request is repeated when the last one is older than the provisioner's memory of
# unavailable offerings (3 minutes): by then a retried message may need capacity the first pass missed.
REREQUEST_SECONDS = 180.0

# Kinds whose replacement must avoid the reclaimed spot pool. A scheduled change or a stopped instance
# says nothing about the capacity pool, so its offering stays available.
_RECLAIMED_POOL_KINDS = frozenset({EventKind.SPOT_INTERRUPTION, EventKind.REBALANCE})

# States in which EC2 already took the instance away: nothing to terminate, pods are dead already.
_GONE_STATES = frozenset({"shutting-down", "terminated"})

_EVENT_REASONS: Mapping[EventKind, str] = {
    EventKind.SPOT_INTERRUPTION: "SpotInterrupted",
    EventKind.REBALANCE: "SpotRebalanceRecommendation",
    EventKind.SCHEDULED_CHANGE: "ScheduledMaintenance",
    EventKind.STATE_CHANGE: "InstanceStateChange",
    EventKind.ASG_LIFECYCLE: "ASGLifecycleTerminating",
}


class Outcome(StrEnum):
    """What became of one instance named in an event."""

    NOT_IN_CLUSTER = "notInCluster"  # no node of this cluster runs on it: acknowledged, untouched
    IGNORED = "ignored"  # the configured action is ``ignore``
    TAINTED = "tainted"  # PreferNoSchedule taint and replacement request, no drain (rebalance)
    ALREADY_DRAINING = "alreadyDraining"  # a taint-only event for a node already being drained
    CORDONED = "cordoned"  # begin() finished; handle() goes on to drain (cordon-only mode: stops here)
    EXCLUDED = "excluded"  # the node matches ``exclude_node_labels``: left alone
    DRY_RUN = "dryRun"  # dry-run mode: logged what would be done, changed nothing
    DRAIN_INCOMPLETE = "drainIncomplete"  # pods still on the node when time ran out: retry the message
    DRAINED = "drained"  # drained; the instance is not ours (or stays), the node stays cordoned
    TERMINATED = "terminated"  # drained, our instance terminated and its Node deleted
    NODE_DELETED = "nodeDeleted"  # drained and the Node of a terminated instance deleted


@dataclass(frozen=True, slots=True)
class InstanceOutcome:
    """One instance of an event: the node it runs, what was done and the figures the metrics need."""

    instance_id: str
    node: str | None
    outcome: Outcome
    owned: bool = False
    event_to_cordon: float | None = None  # seconds from the event's time; set by the call that cordoned
    replacement_requested: bool = False
    evicted: tuple[str, ...] = ()
    not_evicted: tuple[NotEvicted, ...] = ()
    evictions_blocked: int = 0  # eviction attempts a PodDisruptionBudget refused (HTTP 429, DisruptionBudget)
    evictions_throttled: int = 0  # eviction attempts refused by API throttling or a 5xx (retried)
    drain_seconds: float | None = None  # from drain start (the annotation) to the last pod gone
    instance_gone: bool = False  # the drain could not finish, but EC2 had already taken the instance

    @property
    def retry(self) -> bool:
        return self.outcome is Outcome.DRAIN_INCOMPLETE


@dataclass(frozen=True, slots=True)
class EventOutcome:
    event_id: str
    kind: EventKind
    action: Action
    instances: tuple[InstanceOutcome, ...]

    @property
    def retry(self) -> bool:
        """True when the message must come back (a drain could not finish in this invocation)."""
        return any(i.retry for i in self.instances)


@dataclass
class InterruptionService:
    """Handles parsed interruption events against a cluster and a cloud (ports injected)."""

    cluster: ClusterPort
    cloud: CloudPort
    replacements: ReplacementRequester | None  # None: no provisioner function to ask (local runs)
    clock: Clock
    cluster_name: str
    actions: Mapping[str, str] = field(default_factory=dict)  # InterruptionConfig, by event kind
    sleep: Callable[[float], None] | None = None  # None: the clock's own sleep
    poll_interval: float = 1.0
    retry_interval: float = 5.0
    # NTH parity (InterruptionConfig): see docs/interruption.md.
    cordon_only: bool = False
    dry_run: bool = False
    drain_options: DrainOptions = field(default_factory=DrainOptions)
    node_grace_seconds: float | None = None
    exclude_node_labels: Mapping[str, str] = field(default_factory=dict)
    hooks: LifecycleHooks | None = None  # None: no Auto Scaling access (local runs)
    # migration.adoptKarpenterNodes: Karpenter's instances are terminated like ours and their Nodes'
    # karpenter.sh/termination finalizer removed on delete (docs/migration.md).
    adopt_karpenter: bool = False
    # When this service cordoned each node (wall clock): DrainSeconds to sub-second precision, where the
    # annotation (whole seconds, shared with the other functions) is all a retry has.
    _cordoned_at: dict[str, float] = field(default_factory=dict, init=False, repr=False)
    states: NodeStates = field(init=False, repr=False)
    leases: DrainLeases = field(init=False, repr=False)
    # The holder of the drains a caller starts without naming a lease (one per service: tests, local runs).
    _holder: str = field(default_factory=lambda: f"service-{uuid.uuid4().hex[:12]}", init=False, repr=False)

    def __post_init__(self) -> None:
        self.states = NodeStates(self.cluster)
        self.leases = DrainLeases(self.cluster, self.states)

    @property
    def _release_finalizers(self) -> tuple[str, ...]:
        return (KARPENTER_TERMINATION_FINALIZER,) if self.adopt_karpenter else ()

    def action(self, event: InterruptionEvent) -> Action:
        return action_for(event.kind, self.actions)

    # ----- the fast part -------------------------------------------------------------------------
    def lease(self) -> DrainLease:
        """The lease of a caller that names none: this service's holder, for Lambda's longest invocation."""
        return DrainLease(self._holder, self.clock.now() + DEFAULT_LEASE_SECONDS)

    def begin(self, event: InterruptionEvent, *, pool: Executor | None = None,
              skip: frozenset[str] = frozenset(), lease: DrainLease | None = None) -> tuple[InstanceOutcome, ...]:
        """Taint (and for ``drain``, cordon and annotate) every affected node and request replacement
        capacity. Idempotent; returns ``CORDONED`` for the nodes ``handle`` still has to drain and
        ``ALREADY_DRAINING`` for those another invocation took (and for the instances in ``skip``).

        With a ``pool`` the nodes are tainted and cordoned on its bounded workers: a Health event naming
        40 nodes costs a few round trips per worker before the first drain, not a few per node. ``lease``: the
        invocation that holds the drains it takes (``lease()`` when None); a node another invocation holds is
        ``ALREADY_DRAINING``."""
        action = self.action(event)
        held = lease or self.lease()
        if action is Action.IGNORE:
            return tuple(InstanceOutcome(iid, None, Outcome.IGNORED) for iid in event.instance_ids)
        by_instance = {n.instance_id: n for n in self.cluster.nodes() if n.instance_id}

        def one(iid: str) -> InstanceOutcome:
            node = by_instance.get(iid)
            if node is not None and self.exclude_node_labels and all(
                    node.labels.get(k) == v for k, v in self.exclude_node_labels.items()):
                return InstanceOutcome(iid, node.name, Outcome.EXCLUDED)
            if node is not None and iid in skip:
                return InstanceOutcome(iid, node.name, Outcome.ALREADY_DRAINING)
            if node is not None and self.dry_run:
                log.info("dry run: would %s node %s for %s", action.value, node.name, event.event_id,
                         extra={"node": node.name, "instance_id": iid, "action": action.value})
                return InstanceOutcome(iid, node.name, Outcome.DRY_RUN)
            result = None if node is None else (
                self._cordon(event, node, held) if action is Action.DRAIN else self._taint(event, node))
            return InstanceOutcome(iid, None, Outcome.NOT_IN_CLUSTER) if result is None else result

        outcomes = _each(pool, one, event.instance_ids)
        touched = [by_instance[o.instance_id] for o in outcomes if o.node is not None and o.outcome in (
            Outcome.CORDONED, Outcome.TAINTED)]
        if not touched:
            return tuple(outcomes)
        instances = {i.instance_id: i for i in self.cloud.describe_instances(
            [n.instance_id for n in touched if n.instance_id])}
        requested = self._request_replacement(event, touched, instances, outcomes, pool=pool)
        return tuple(replace(o, owned=self._owned(instances.get(o.instance_id)),
                             replacement_requested=o.node in requested) for o in outcomes)

    def _cordon(self, event: InterruptionEvent, node: Node, lease: DrainLease) -> InstanceOutcome | None:
        iid = node.instance_id or ""
        try:
            now = self.clock.now()
            if not self.leases.take(node, reason=event.kind.value, lease=lease, now=now):
                log.info("node %s was taken by another invocation; left to it", node.name,
                         extra={"node": node.name, "instance_id": iid, "event_id": event.event_id})
                return InstanceOutcome(iid, node.name, Outcome.ALREADY_DRAINING)
            tainted = self.cluster.add_taint(node.name, DISRUPTED_TAINT)
            cordoned = self.cluster.cordon(node.name)
        except NotFoundError:
            return None  # deleted since the listing: nothing left to protect
        first = tainted or cordoned
        if first:
            self._cordoned_at[node.name] = now
            ec2_state = f" ({event.state})" if event.state else ""
            self.cluster.record_event(node, reason=_EVENT_REASONS[event.kind], event_type="Warning",
                                      message=f"{event.detail_type or event.kind.value}{ec2_state} for {iid} "
                                              f"(event {event.event_id}): tainted, cordoned, draining")
        return InstanceOutcome(iid, node.name, Outcome.CORDONED,
                               event_to_cordon=max(0.0, now - event.time) if first and event.time is not None else None)

    def _taint(self, event: InterruptionEvent, node: Node) -> InstanceOutcome | None:
        iid = node.instance_id or ""
        if self.states.read(node).drain_started is not None or any(
                t.key == DISRUPTED_TAINT.key and t.effect == DISRUPTED_TAINT.effect for t in node.taints):
            # A later rebalance for a node already draining (events out of order) adds nothing.
            return InstanceOutcome(iid, node.name, Outcome.ALREADY_DRAINING)
        try:
            added = self.cluster.add_taint(node.name, REBALANCE_TAINT)
        except NotFoundError:
            return None
        if added:
            self.cluster.record_event(node, reason=_EVENT_REASONS[event.kind], event_type="Warning",
                                      message=f"{event.detail_type or event.kind.value} for {iid} (event "
                                              f"{event.event_id}): tainted PreferNoSchedule, replacement requested")
        return InstanceOutcome(iid, node.name, Outcome.TAINTED)

    def _owned(self, instance: CloudInstance | None) -> bool:
        return instance is not None and is_owned(instance.tags, self.cluster_name,
                                                 adopt_karpenter=self.adopt_karpenter)

    def _request_replacement(self, event: InterruptionEvent, nodes: Sequence[Node],
                             instances: Mapping[str, CloudInstance], outcomes: Sequence[InstanceOutcome],
                             pool: Executor | None = None) -> set[str]:
        """One request for every node that has none recent; marks the nodes so retries do not repeat it."""
        now = self.clock.now()
        # A node cordoned by this call asks again even after a recent request (a rebalance escalated to
        # a spot warning); otherwise retries and duplicates do not repeat a request younger than 3 minutes.
        just_cordoned = {o.node for o in outcomes if o.event_to_cordon is not None}
        due = [n for n in nodes if n.name in just_cordoned or _replacement_due(n, now=now)]
        if not due:
            return set()
        unavailable: list[tuple[str, str, str]] = []
        if event.kind in _RECLAIMED_POOL_KINDS:
            for node in due:
                offering = _offering(node, instances.get(node.instance_id or ""))
                if offering is not None and offering[2] == "spot" and offering not in unavailable:
                    unavailable.append(offering)
        names = [n.name for n in due]
        if self.replacements is None:
            return set()
        try:
            sent = self.replacements.request_replacement(source="interruption", nodes=names,
                                                         unavailable=unavailable, event_id=event.event_id)
        except CloudError as exc:
            if not exc.retryable:
                raise  # a configuration fault (no such function, no permission): retrying the message says so
            # Throttled after the SDK's own retries: the cordon stands and the drain must not wait for it.
            # ``handle`` asks again (the annotation was not written) and the provisioner's scheduled pass
            # picks the evicted pods up in any case.
            log.warning("replacement request throttled; draining anyway", extra={
                "event_id": event.event_id, "nodes": names, "error": str(exc)})
            return set()
        if not sent:
            return set()
        def mark(node: Node) -> None:
            state = self.states.read(node)
            with contextlib.suppress(NotFoundError, NotOwnedError):
                self.states.write(node, state, request_replacement(
                    state, owner=Owner.INTERRUPTION, reason=state.reason or event.kind.value, at=now),
                    by=Owner.INTERRUPTION)
        _each(pool, mark, due)
        return set(names)

    # ----- the whole job ---------------------------------------------------------------------------
    def handle(self, event: InterruptionEvent, *, drain_until: float, pool: Executor | None = None,
               cordons: Executor | None = None, begun: tuple[InstanceOutcome, ...] | None = None,
               taken_elsewhere: frozenset[str] = frozenset(), lease: DrainLease | None = None) -> EventOutcome:
        """``begin``, then drain each cordoned node until its event's deadline or ``drain_until`` (a
        ``clock.monotonic()`` reading: the invocation's end less a safety margin), whichever is first;
        then terminate our instances and delete Nodes whose instance is gone. Nodes whose drain could not
        finish stay cordoned and annotated and come back as ``DRAIN_INCOMPLETE``.

        With a ``pool`` the nodes are drained in parallel on its bounded workers (the handler shares one
        pool across the batch, so ten spot warnings drain at once, as NTH's ten workers do); a node whose
        turn comes after its deadline is not started at all. Every node is finished before the first
        failure, if any, is raised. ``cordons`` is ``begin``'s pool (never the drains' own: a cordon must not
        queue behind drains). ``begun``: what a ``begin`` of this very event returned moments ago, with nothing
        since on its nodes (the batch's cordon pass); it is not repeated.

        ``taken_elsewhere``: instances whose node another invocation took during this invocation's cordon
        pass (``begin`` returned ``ALREADY_DRAINING``); that invocation drains them, this one leaves them.
        ``lease``: as for ``begin``; a drain that cannot finish releases it for the message's retry."""
        held = lease or self.lease()
        started = self.begin(event, pool=cordons, skip=taken_elsewhere, lease=held) if begun is None else begun
        started = tuple(replace(o, outcome=Outcome.ALREADY_DRAINING, event_to_cordon=None)
                        if o.instance_id in taken_elsewhere and o.outcome is Outcome.CORDONED else o
                        for o in started)

        def finish(o: InstanceOutcome) -> InstanceOutcome:
            if o.outcome is not Outcome.CORDONED or self.cordon_only:
                return o
            done = self._finish(event, o, drain_until=drain_until)
            if done.outcome in (Outcome.DRAIN_INCOMPLETE, Outcome.DRAINED):
                self.leases.release_node(done.node or "", held)
            return done

        if pool is None:
            done = tuple(finish(o) for o in started)
        else:
            futures = [pool.submit(finish, o) for o in started]
            wait(futures)
            done = tuple(f.result() for f in futures)
        outcome = EventOutcome(event.event_id, event.kind, self.action(event), done)
        self._answer_lifecycle_hook(event, outcome)
        return outcome

    def release(self, lease: DrainLease) -> None:
        """The invocation holding ``lease`` ends: its drains may be taken by the next one at once."""
        self.leases.release(lease)

    def handle_launch(self, hook: LaunchHook) -> bool:
        """An Auto Scaling launch lifecycle hook: CONTINUE once the instance is a Ready node of the
        cluster (True: done); until then a heartbeat keeps the group waiting and the message is retried
        (False). Without Auto Scaling access (local runs) there is nothing to answer."""
        if self.hooks is None:
            return True
        node = next((n for n in self.cluster.nodes() if n.instance_id == hook.action.instance_id), None)
        if node is not None and node.ready:
            self.hooks.complete(hook.action, result="CONTINUE")
            return True
        # A heartbeat on an action that is no longer active (completed, or timed out) means nothing waits.
        return not self.hooks.heartbeat(hook.action)

    def _answer_lifecycle_hook(self, event: InterruptionEvent, outcome: EventOutcome) -> None:
        """An Auto Scaling group waits on its terminate hook: CONTINUE once the node is drained (or there is
        nothing to drain), a heartbeat while the drain is retried so the group keeps the instance. In
        cordon-only and dry-run modes the group is not held either: it continues at once."""
        if event.lifecycle is None or self.hooks is None:
            return
        if outcome.retry:
            self.hooks.heartbeat(event.lifecycle)
        else:
            self.hooks.complete(event.lifecycle, result="CONTINUE")

    def _finish(self, event: InterruptionEvent, started: InstanceOutcome, *, drain_until: float) -> InstanceOutcome:
        name = started.node or ""
        gone = event.kind is EventKind.STATE_CHANGE and event.state in _GONE_STATES
        now = self.clock.now()
        deadline = min(self.clock.monotonic() + (drain_deadline(event, now=now) - now), drain_until)
        if self.node_grace_seconds is not None:
            deadline = min(deadline, self.clock.monotonic() + self.node_grace_seconds)
        if self.clock.monotonic() >= deadline:
            # Queued behind other drains until past the deadline: no eviction pass that would run past the
            # invocation's end; the node stays cordoned and the message comes back.
            return replace(started, outcome=Outcome.DRAIN_INCOMPLETE)
        # For instances already gone pods are deleted at once: their containers died with the instance, and a
        # grace period would only keep the pods, and the Node, around.
        options = replace(self.drain_options, grace_seconds=0) if gone else self.drain_options
        result = drain(name, cluster=self.cluster, clock=self.clock, deadline=deadline, sleep=self.sleep,
                       poll_interval=self.poll_interval, retry_interval=self.retry_interval, options=options)
        outcome = replace(started, evicted=result.evicted, not_evicted=result.not_evicted,
                          evictions_blocked=result.blocked, evictions_throttled=result.throttled)
        node = self.cluster.get_node(name)
        if not result.complete and self._instance_gone(started.instance_id):
            # As Karpenter's termination controller: once the instance is gone its pods are dead whatever
            # a PodDisruptionBudget says; the Node and its pods are deleted, the message acknowledged. The pods
            # are deleted here (no PDB check, no grace) rather than left to the pod garbage collector.
            for pod in self.cluster.pods(node_name=name):
                self.cluster.delete_pod(pod.namespace, pod.name, grace_seconds=0)
            self.cluster.delete_node(name, release_finalizers=self._release_finalizers)
            return replace(outcome, outcome=Outcome.NODE_DELETED, instance_gone=True)
        if not result.complete:
            if node is not None:
                blocked = ", ".join(f"{p.pod} ({p.reason})" for p in result.not_evicted[:5])
                more = f" and {len(result.not_evicted) - 5} more" if len(result.not_evicted) > 5 else ""
                self.cluster.record_event(node, reason="DrainIncomplete", event_type="Warning",
                                          message=f"{len(result.not_evicted)} pods could not be evicted in "
                                                  f"this invocation: {blocked}{more}; will retry")
            return replace(outcome, outcome=Outcome.DRAIN_INCOMPLETE)
        started_at = self._cordoned_at.get(name) or (self.states.read(node).drain_started if node else None)
        if started_at is not None:
            outcome = replace(outcome, drain_seconds=max(0.0, self.clock.now() - started_at))
        if started.owned and not gone and event.kind is not EventKind.ASG_LIFECYCLE:
            # Ours and still there: it would be reclaimed anyway; terminating now stops the bill and the
            # kubelet at once. The instance's tags were checked; AwsCloud.terminate checks them again.
            self.cloud.terminate([started.instance_id])
            self.cluster.delete_node(name, release_finalizers=self._release_finalizers)
            return replace(outcome, outcome=Outcome.TERMINATED)
        if gone:
            self.cluster.delete_node(name, release_finalizers=self._release_finalizers)
            return replace(outcome, outcome=Outcome.NODE_DELETED)
        if node is not None:
            self.cluster.record_event(node, reason="Drained", message="every pod that had to move was evicted; "
                                      "the instance is not managed by this autoscaler and is left running")
        return replace(outcome, outcome=Outcome.DRAINED)


    def _instance_gone(self, instance_id: str) -> bool:
        """EC2 reports the instance terminated (or shutting down), or no longer knows it."""
        if not instance_id:
            return False
        found = self.cloud.describe_instances([instance_id])
        return not found or all(i.state in _GONE_STATES for i in found)


def _each(pool: Executor | None, fn: Callable[[_T], _R], items: Sequence[_T]) -> list[_R]:
    """``fn`` over ``items`` in order, on ``pool`` when there is one; every item is finished before the
    first failure, if any, is raised (as the sequential loop would leave none half-started)."""
    if pool is None:
        return [fn(item) for item in items]
    futures = [pool.submit(fn, item) for item in items]
    wait(futures)
    return [f.result() for f in futures]


def _replacement_due(node: Node, *, now: float) -> bool:
    at = read_state(node.annotations).replacement_requested
    return at is None or now - at >= REREQUEST_SECONDS


def _offering(node: Node, instance: CloudInstance | None) -> tuple[str, str, str] | None:
    """(instance type, zone, capacity type) of the node: labels first, else what EC2 says."""
    labels = node.labels
    it, zone, ct = labels.get(INSTANCE_TYPE_LABEL), labels.get(ZONE_LABEL), labels.get(CAPACITY_TYPE_LABEL)
    if instance is not None:
        it, zone, ct = it or instance.instance_type, zone or instance.zone, ct or instance.capacity_type
    if it and zone and ct:
        return (it, zone, ct)
    return None
