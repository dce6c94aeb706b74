"""The provisioner service: from pending pods to launched nodes, one *pass* at a time.

A pass gathers the cluster and cloud state through the ports, plans with the scheduler (the same code
as ``autoscaler plan``), launches each planned node group with one CreateFleet request, records a
Kubernetes Event on every pod it nominated, emits the provisioner's metrics and runs the node
lifecycle sweep. ``watch`` keeps a pending-pod watch open after the first pass and runs another pass
per batch of new pending pods (1 s idle / 10 s max, Karpenter's batching window).

No double launches: each planned node's claim (its pods, what was asked for and, once EC2 answered,
its instance) is written to the claims table before CreateFleet, so a later pass counts those pods on
their in-flight capacity before anything else; one pass at a time holds the cluster's launch lease.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from autoscaler.app.claims import ClaimBook, MemoryClaimStore, Reconciled
from autoscaler.app.cluster_state import ClusterRead, Listing, read_cluster
from autoscaler.app.launcher import fleet_request_for, new_claim_id
from autoscaler.app.lifecycle import REGISTRATION_TIMEOUT_SECONDS, LifecycleResult, reconcile, register_claimed
from autoscaler.app.node_state import NodeStates
from autoscaler.app.nominations import Nominations
from autoscaler.app.pass_metrics import emit_pass_metrics
from autoscaler.app.pass_report import GroupOutcome, LaunchFailure, LaunchFailureKind, PassResult, group_launches
from autoscaler.app.plan_prep import PlanPrep
from autoscaler.app.planning import decide
from autoscaler.app.pod_events import PodEvent, PodEvents
from autoscaler.app.ports import ClaimStore, Clock, CloudError, CloudPort, ClusterError, ClusterPort
from autoscaler.domain.batching import BATCH_IDLE_SECONDS, BATCH_MAX_SECONDS
from autoscaler.domain.claims import Claim, claims_for
from autoscaler.domain.errors import ConfigError
from autoscaler.domain.fleet import CloudInstance, FleetRequest, FleetResult, LaunchedInstance
from autoscaler.domain.initialization import capacity_view, is_initialized
from autoscaler.domain.models import Node, Pod
from autoscaler.domain.node_state import Owner, awaits_replacement, mark_provisioned
from autoscaler.domain.nodeclass import NodeClass
from autoscaler.domain.nodepool import NodePool
from autoscaler.domain.ownership import pod_tag_budget, pod_tags, pods_from_tags
from autoscaler.domain.plan import InFlightNode, Launch, Plan, PlanInput
from autoscaler.metrics_catalog import MetricsSink

# The launch lease outlives a pass that died holding it by at most this long.
LEASE_SECONDS = 90.0
log = logging.getLogger(__name__)

# CreateFleet calls in flight at once: a 50k-pod burst has dozens of node groups at ~1.5 s each on EC2, and
# a pass must launch them all in one or two waves. Bursts this size fit EC2's per-API request buckets;
# a throttle beyond them is absorbed by the clients' adaptive retries (``client_config``).
LAUNCH_THREADS = 32
# A CreateFleet not started this close to the invocation's end is left to the next pass.
LAUNCH_RESERVE_SECONDS = 8.0
# The sweep (Karpenter's garbage collection): every owned instance listed, instances that never registered
# terminated, Nodes whose instance is gone deleted, unclaimed instances counted, launched claims whose instance
# ended finished. A scheduled pass sweeps when the container's last sweep is this old (a new container's first
# scheduled pass always does); every other pass takes in-flight capacity from the node claims alone
# (``Listing.CLAIMED``), so a pass after a burst never lists the thousands of instances it launched. An orphan
# is therefore found within SWEEP_SECONDS plus one schedule period (docs/provisioner.md).
SWEEP_SECONDS = 240.0


@dataclass(frozen=True, slots=True)
class ProvisionerSettings:
    cluster_name: str
    region: str = ""
    dry_run: bool = False
    registration_timeout: float = REGISTRATION_TIMEOUT_SECONDS
    batch_idle: float = BATCH_IDLE_SECONDS
    batch_max: float = BATCH_MAX_SECONDS
    lifecycle: bool = True
    release_finalizers: tuple[str, ...] = ()  # Karpenter's, with migration.adoptKarpenterNodes (lifecycle.py)


@dataclass(frozen=True, slots=True)
class ReplacementRequest:
    """Capacity is going away: plan its pods elsewhere now."""

    source: str
    nodes: tuple[str, ...]
    unavailable: tuple[tuple[str, str, str], ...] = ()
    event_id: str = ""


@dataclass
class Pass:
    """One provisioner pass: created by ``run_pass``, dropped when it returns. The long-lived service holds
    dependencies only; everything a pass learns on its way lives here."""

    holder: str  # this pass's name on the launch lease
    reason: str
    started: float  # the clock's monotonic reading when the pass began
    deadline: float | None  # the monotonic time the invocation must be done by (None: no limit)
    woken: bool  # a watcher's wake-up (docs/provisioner.md)
    sweep: bool  # lists every owned instance and runs the whole lifecycle sweep (``SWEEP_SECONDS``)
    leaving: set[str]  # nodes whose pods are planned elsewhere
    blocked: str = ""  # why this pass may not launch ("" when it holds the lease)
    read: ClusterRead | None = None  # the pass's one read of the cluster and the cloud
    reconciled: Reconciled = field(default_factory=Reconciled)  # what the stored node claims came to
    awaiting: dict[str, Node] = field(default_factory=dict)  # nodes awaiting replacement, planned now

    @property
    def owned(self) -> list[CloudInstance] | None:
        """Every live instance of ours, as this pass listed them (None: a woken pass did not)."""
        return self.read.owned if self.read is not None else None


class Provisioner:
    """One cluster's provisioner: its dependencies and what a warm container keeps between passes (pod
    Event de-duplication, the planner's NodePool table). A pass's own state is its ``Pass``."""

    def __init__(self, *, cluster: ClusterPort, cloud: CloudPort, node_pools: Sequence[NodePool],
                 node_classes: Mapping[str, NodeClass], settings: ProvisionerSettings,
                 clock: Clock, sink: MetricsSink | None = None, claims: ClaimStore | None = None) -> None:
        self.cluster, self.cloud = cluster, cloud
        self.node_pools = list(node_pools)
        self.pools_by_name = {p.name: p for p in self.node_pools}
        self.node_classes = node_classes
        self.settings = settings
        self.clock = clock
        self._now, self._mono = clock.now, clock.monotonic
        self.sink = sink
        self.states = NodeStates(cluster)
        # The durable record of launches (written before CreateFleet): in-flight capacity that survives
        # lost responses, EC2's lagging views and a new container.
        self.claims = ClaimBook(claims if claims is not None else MemoryClaimStore())
        self._holder = f"pass-{new_claim_id()}"
        self._passes = 0
        self.events = PodEvents(cluster, clock)  # rate-limited, de-duplicated pod Events
        self.prep = PlanPrep()  # planning inputs kept between passes: same plans, less CPU on a warm pass
        self.nominations = Nominations()  # pods placed on existing nodes, until they bind (app/nominations.py)
        self.swept_at: float | None = None  # when this container's last sweep listed every owned instance

    # ----- one pass ----------------------------------------------------------------------------
    def run_pass(self, *, reason: str = "scheduled", leaving_nodes: Collection[str] = (),
                 deadline: float | None = None, woken: bool = False) -> PassResult:
        """One pass. ``deadline`` (the clock's monotonic time the invocation must be done by): launches
        not started shortly before it are left to the next pass instead of running into the timeout.
        ``woken``: a watcher's wake-up, which never sweeps (``SWEEP_SECONDS``): its in-flight capacity comes
        from the node claims (docs/provisioner.md)."""
        self._passes += 1
        now = self._now()
        # A clock that went backwards proves nothing about the last sweep's age: sweep.
        due = self.swept_at is None or not 0 <= now - self.swept_at < SWEEP_SECONDS
        current = Pass(holder=f"{self._holder}-{self._passes}", reason=reason, started=self._mono(),
                       deadline=deadline, woken=woken, sweep=due and not woken, leaving=set(leaving_nodes))
        current.blocked = "" if self.settings.dry_run else self._acquire(current.holder)
        holds_lease = not current.blocked and not self.settings.dry_run
        try:
            return self._run(current)
        finally:
            if holds_lease:
                try:
                    self.claims.store.release_lease(current.holder)
                except CloudError as exc:  # it expires on its own
                    log.warning("could not release the launch lease: %s", exc)

    def _acquire(self, holder: str) -> str:
        """Take the cluster's launch lease; the reason this pass may not launch, or "" when it may."""
        try:
            if self.claims.store.acquire_lease(holder, now=self._now(), seconds=LEASE_SECONDS):
                return ""
            return "another provisioner pass holds the launch lease"
        except CloudError as exc:
            return f"the node claim store is unavailable ({exc.code or exc})"

    def _run(self, current: Pass) -> PassResult:
        snap = self._gather(current)
        plan, plan_seconds = self._plan(snap)
        result = PassResult(reason=current.reason, dry_run=self.settings.dry_run, plan=plan,
                            started_at=current.started, blocked=current.blocked, claims=current.reconciled)
        # Only pending pods are ever looked up (those the plan names): unbound, so bound pods are skipped cheaply.
        pods = {p.key: p for p in snap.pods if p.node_name is None}
        result.groups = self._launch(plan, pods, current)
        price = {(o.instance_type, o.zone, o.capacity_type): o.price for o in snap.offerings
                 } if any(g.launched for g in result.groups) else {}
        for g in result.groups:
            g.prices = {i.instance_id: price.get((i.instance_type, i.zone, i.capacity_type), 0.0) for i in g.launched}
        if not (self.settings.dry_run or current.blocked):
            nodes = {n.name for n in snap.nodes if n.name not in current.leaving}
            self.nominations.remember(plan.existing, pods, nodes, now=self._now())
        self._mark_provisioned(result, current.awaiting)
        self._nominate(result, pods)
        owned: list[CloudInstance] | None = []
        if self.settings.lifecycle:
            result.lifecycle, owned = self._lifecycle(current, launched=any(g.launched for g in result.groups))
        self._emit(result, snap, plan_seconds, owned, pods)
        result.seconds = self._mono() - current.started
        log.debug(result.summary())  # the handler logs it, structured
        return result

    def _static(self, node: Node) -> bool:
        pool = self.pools_by_name.get(node.node_pool)
        return pool is not None and pool.is_static

    def _mark_provisioned(self, result: PassResult, awaiting: Mapping[str, Node]) -> None:
        """Record on each node awaiting replacement that its capacity is planned, once every pod on it
        has a place (existing, in-flight or launched); otherwise the next pass plans for it again."""
        if not awaiting or result.dry_run:
            return
        unplaced = {u.pod for u in result.plan.unschedulable}
        unplaced.update(k for g in result.groups if g.failure or g.missing for k in g.pods)
        for node in awaiting.values():
            if unplaced and unplaced & {p.key for p in self.cluster.pods(node_name=node.name)}:
                continue
            state = self.states.read(node)
            try:
                self.states.write(node, state, mark_provisioned(state), by=Owner.PROVISIONER)
            except ClusterError as exc:
                log.warning("could not record the replacement of node %s as planned: %s", node.name, exc)

    def _gather(self, current: Pass) -> PlanInput:
        """The pass's one read of the cluster and the cloud, its claims reconciled, as the planner's input."""
        read = current.read = read_cluster(
            cluster=self.cluster, cloud=self.cloud, node_pools=self.node_pools, node_classes=self.node_classes,
            listing=Listing.OWNED if current.sweep else Listing.CLAIMED, claims=self.claims.store)
        # Nodes whose replacement was asked for and not yet planned (the record survives a delayed or
        # lost invoke). Once planned, the node is an ordinary node again until it is drained: its pods are
        # not pending, and counting them as pending forever would keep PendingPods above zero.
        # A static pool's node being replaced is not leaving for the planner: the pool's count launches its
        # replacement, and its pods move once that has registered.
        static = {n.name for n in read.nodes if self._static(n)}
        current.awaiting = {n.name: n for n in read.nodes if awaits_replacement(n.annotations)
                            and n.name not in static and n.name not in current.leaving}
        current.leaving = (current.leaving | set(current.awaiting)) - static
        flying, launched_for = self._reconcile(current, read)
        snap = read.plan_input(node_pools=self.node_pools, node_classes=self.node_classes,
                               region=self.settings.region, leaving=current.leaving, from_claims=flying,
                               launched_for=launched_for)
        snap = capacity_view(snap, now=self._now(), registration_timeout=self.settings.registration_timeout)
        # Pods an earlier pass of this container placed on existing nodes, not bound yet: still there.
        snap.pods = self.nominations.apply(snap.pods, {n.name for n in snap.nodes if n.name not in current.leaving},
                                           now=self._now())
        return snap

    def _reconcile(self, current: Pass, read: ClusterRead) -> tuple[Sequence[InFlightNode],
                                                                      Mapping[str, tuple[str, ...]]]:
        """The stored node claims against what the pass read: in-flight capacity from the durable launch
        record (which wins over EC2's view of the same instance), and the pods each registering node (by
        instance id) was launched for. A pass that may not write (dry run, no lease) reads and changes nothing.
        Launched claims whose instance EC2 no longer lists are asked about by id only after a listing of every
        owned instance (the sweep): from the claims alone, every launched claim not yet a node is out of view."""
        writes = not (self.settings.dry_run or current.blocked)
        # The claims the woken pass's claimed-instance read saw are the ones it reconciles; a pass without the
        # lease reads them again.
        stored = read.stored if not current.blocked else None
        initialized = {n.instance_id for n in read.nodes if n.instance_id and is_initialized(n)}
        try:
            current.reconciled = self.claims.reconcile(
                listed=read.unregistered, registered=read.registered, pending=read.pending(current.leaving),
                now=self._now(), resume=self._resume if writes else None, write=writes, initialized=initialized,
                describe=self.cloud.describe_instances if read.owned is not None else None, stored=stored)
        except CloudError as exc:  # without the record of launches, planning is advice only
            log.warning("node claims could not be read: %s", exc)
            current.blocked = current.blocked or f"the node claim store is unavailable ({exc.code or exc})"
            return [], {}
        return current.reconciled.in_flight, current.reconciled.pinned

    def _resume(self, group: Sequence[Claim]) -> FleetResult:
        """Send a stale claim group's CreateFleet again exactly as first sent (same claim id, count, tags,
        so the same client tokens): EC2 answers with the instances it launched, or launches them now."""
        first = group[0]
        launch = first.as_launch()
        request = fleet_request_for(launch, cluster_name=self.settings.cluster_name, node_pools=self.pools_by_name,
                                    node_classes=self.node_classes, claim_id=first.group)
        tags = self._pod_tags(launch, first.group) if first.group_size == 1 else {}
        return self.cloud.launch(replace(request, count=first.group_size, tags=tags))

    def _plan(self, snap: PlanInput) -> tuple[Plan, float]:
        unavailable = self.cloud.unavailable()
        plan = decide(snap, unavailable=unavailable, timer=self._mono, prepared=self.prep.prepare(snap, unavailable))
        return plan, plan.solve_seconds

    def _launch(self, plan: Plan, pods: Mapping[str, Pod], current: Pass) -> list[GroupOutcome]:
        """One CreateFleet per group of identical planned nodes, up to LAUNCH_THREADS at once (each with
        its claims recorded first and its own client tokens). Groups not started when the invocation is
        about to end are left to the next pass, which plans their pods again."""
        outcomes: list[GroupOutcome] = []
        todo: list[tuple[GroupOutcome, FleetRequest, list[Launch], list[str]]] = []
        for group in group_launches(plan.launches):
            first = group[0]
            keys = tuple(k for launch in group for k in launch.pods)
            try:
                request = fleet_request_for(first, cluster_name=self.settings.cluster_name,
                                            node_pools=self.pools_by_name, node_classes=self.node_classes)
            except ConfigError as exc:
                outcomes.append(GroupOutcome(claim_id="-", launch=first, count=len(group), pods=keys,
                                             failure=LaunchFailure(LaunchFailureKind.CONFIG, str(exc))))
                continue
            # One identity per node: each planned node gets its own claim id, recorded (with its pods) in
            # the claims table; the instances of the one CreateFleet call carry the group's tags.
            ids = [request.claim_id, *(new_claim_id(launch.node_pool) for launch in group[1:])]
            request = replace(request, count=len(group),
                              tags=self._pod_tags(first, request.claim_id) if len(group) == 1 else {})
            outcome = GroupOutcome(claim_id=request.claim_id, launch=first, count=len(group), pods=keys)
            outcomes.append(outcome)
            if self.settings.dry_run:
                continue
            if current.blocked:
                outcome.failure = LaunchFailure(LaunchFailureKind.BLOCKED, current.blocked)
                continue
            todo.append((outcome, request, group, ids))
        if len(todo) == 1:
            self._launch_group(*todo[0], deadline=current.deadline)
        elif todo:
            with ThreadPoolExecutor(max_workers=LAUNCH_THREADS) as workers:
                list(workers.map(lambda item: self._launch_group(*item, deadline=current.deadline), todo))
        return outcomes

    def _launch_group(self, outcome: GroupOutcome, request: FleetRequest, group: list[Launch],
                      ids: list[str], *, deadline: float | None) -> None:
        if deadline is not None and self._mono() > deadline - LAUNCH_RESERVE_SECONDS:
            outcome.failure = LaunchFailure(LaunchFailureKind.DEFERRED,
                                            "the invocation is ending; planned again by the next pass")
            return
        claims = claims_for(group, ids, now=self._now())
        try:
            self.claims.record(claims)  # durable before CreateFleet, or no launch at all
        except CloudError as exc:
            outcome.failure = LaunchFailure(LaunchFailureKind.CLAIM_STORE, f"node claims could not be recorded ({exc})")
            return
        try:
            fleet = self.cloud.launch(request)
        except ConfigError as exc:  # nothing was sent: the claims have nothing to wait for
            outcome.failure = LaunchFailure(LaunchFailureKind.CONFIG, str(exc))
            self.claims.complete(claims, [])
            return
        except Exception as exc:  # one bad group must not stop the others: logged, reported, metered by code
            log.exception("launch %s failed", request.claim_id)
            code = exc.code if isinstance(exc, CloudError) and exc.code else type(exc).__name__
            outcome.failure = LaunchFailure(LaunchFailureKind.ERROR, str(exc), code=code)
            # The claims stay: if EC2 did launch, the next pass finds the instances by their tags,
            # else it resumes the launch with the same client tokens.
            return
        outcome.launched, outcome.errors = list(fleet.launched), list(fleet.errors)
        if len(group) > 1:
            outcome.launched = self._identify(outcome.launched, ids)
        outcome.placed = {key: instance for instance, launch in zip(outcome.launched, group, strict=False)
                          for key in launch.pods}
        self.claims.complete(claims, outcome.launched, uncertain=fleet.uncertain)

    def _pod_tags(self, launch: Launch, claim: str) -> dict[str, str]:
        """The node's pod keys as tags, within what EC2's 50-tag limit leaves after the autoscaler's and
        the EC2NodeClass's own; keys that do not fit are reported, never dropped silently."""
        node_class = self.node_classes.get(launch.node_class)
        budget = pod_tag_budget(node_class.tags if node_class else {})
        tags = pod_tags(list(launch.pods), max_tags=budget)
        missing = len(launch.pods) - len(pods_from_tags(tags))
        if missing:
            log.warning("%d of %d pod keys of node claim %s do not fit in its %d pod-key tag(s); those pods are "
                        "not pinned to it but still placed on in-flight capacity first", missing, len(launch.pods),
                        claim, budget, extra={"claim": claim, "unrecordedPods": missing})
        return tags

    @staticmethod
    def _identify(launched: Sequence[LaunchedInstance], claims: Sequence[str]) -> list[LaunchedInstance]:
        """Give each instance of a grouped launch its own node claim (the planned node it stands for), in
        the pass's memory and, through ``ClaimBook.complete``, in the claims table: that record, not a
        tag, maps an instance to its claim and pods. No CreateTags per instance (one each had been ~4,000
        calls on a 20k-pod pass's critical path); the instances keep the group's tags from CreateFleet,
        by which a pass that lost this record adopts them (``reconcile_claims``)."""
        return [replace(instance, claim_id=claim) for instance, claim in zip(launched, claims, strict=False)]

    # ----- events ------------------------------------------------------------------------------
    def _nominate(self, result: PassResult, pods: Mapping[str, Pod]) -> None:
        """Events a ``kubectl describe pod`` shows: where a pod will go, or why it cannot."""
        todo: list[PodEvent] = []
        if not result.dry_run:
            for g in result.groups:
                for key, i in g.placed.items():
                    if key in pods:
                        todo.append(PodEvent(pods[key], "Nominated", (
                            f"Pod should schedule on: nodeclaim/{i.claim_id} (new node: {i.instance_type} "
                            f"{i.capacity_type} in {i.zone}; instance {i.instance_id})")))
                if g.failure or g.missing:
                    why = str(g.failure or "") or ", ".join(sorted({e.code for e in g.errors})) or "no capacity"
                    todo += [PodEvent(pods[key], "LaunchFailed", (
                        f"Failed to launch a node for this pod (node claim {g.claim_id}): {why}; it is planned "
                        "again on the next pass"), "Warning") for key in g.pods if key in pods and key not in g.placed]
        for u in result.plan.unschedulable:
            pod = pods.get(u.pod)
            if pod is not None:
                todo.append(PodEvent(pod, "FailedScheduling", f"Failed to schedule pod: {u.reason}", "Warning"))
        sent = self.events.send(todo)
        result.events_failed, result.events_suppressed = sent.failed, sent.suppressed

    # ----- lifecycle ---------------------------------------------------------------------------
    def _lifecycle(self, current: Pass, *, launched: bool = False) -> tuple[LifecycleResult,
                                                                            list[CloudInstance] | None]:
        try:
            nodes = self.cluster.nodes()
            if current.owned is None:  # not a sweep: its claims' nodes only; the next sweep does the rest
                return register_claimed(cluster=self.cluster, cloud=self.cloud, nodes=nodes,
                                        claimed=self._claimed(current), node_pools=self.pools_by_name,
                                        dry_run=self.settings.dry_run), None
            owned = list(current.owned)  # listed by this pass's read; this pass's launches are not due yet
        except Exception as exc:  # lifecycle is housekeeping: never fail a pass that launched nodes (logged,
            # and reported in the pass's lifecycle errors)
            log.warning("lifecycle skipped: %s", exc)
            return LifecycleResult(errors=[f"lifecycle skipped: {exc}"]), []
        result = reconcile(cluster=self.cluster, cloud=self.cloud, nodes=nodes, owned=owned,
                           node_pools=self.pools_by_name, now=self._now(),
                           registration_timeout=self.settings.registration_timeout, dry_run=self.settings.dry_run,
                           release_finalizers=self.settings.release_finalizers, collect_templates=not launched)
        self.swept_at = self._now()
        return result, owned

    @staticmethod
    def _claimed(current: Pass) -> list[CloudInstance]:
        """The instances of the pass's node claims as the claims recorded them, and those found for its
        uncertain claims by their tags: what registering their nodes needs, without describing them."""
        read = current.read
        if read is None:
            return []
        recorded = [i for c in read.stored or () if (i := c.instance()) is not None]
        return [*recorded, *(read.claimed or ())]

    # ----- metrics -----------------------------------------------------------------------------
    def _emit(self, result: PassResult, snap: PlanInput, plan_seconds: float, owned: Sequence[CloudInstance] | None,
              pods: Mapping[str, Pod]) -> None:
        if self.sink is not None:
            emit_pass_metrics(self.sink, result=result, snap=snap, plan_seconds=plan_seconds,
                              owned=owned if self.settings.lifecycle else None, pods=pods,
                              node_pools=self.node_pools, prices_stale=self.cloud.prices_stale, now=self._now())
