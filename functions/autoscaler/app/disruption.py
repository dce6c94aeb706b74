"""One pass of the disruption function, through the ports: keep the ``empty-since`` annotations true,
carry on with disruptions already under way, decide new ones (``disruption.decide``) and carry them out.

Order of work for a node, every step recorded in node annotations so a later pass (another Lambda
container) continues where this one stopped:

1. ``replace`` decisions (Expired with pods that need new capacity, Underutilized/Replace) request
   replacement capacity first and annotate ``replacement-requested``; later passes check whether the
   node's pods now fit on registered nodes (no in-flight capacity counted) and only then go on;
2. taint ``karpenter.sh/disrupted:NoSchedule``, cordon, annotate ``drain-started`` / ``drain-reason``;
3. drain through the Eviction API (resumable; bounded per pass and by the Lambda's remaining time);
   a drain that a PDB blocks leaves the node cordoned for the next pass, and one blocked for longer
   than ``blocked_drain_timeout`` is released (taint, cordon and annotations removed);
4. terminate the instance (only one with this cluster's ownership tags) and delete the Node.
Nodes Karpenter launched are disrupted like ours only when adopted (``app/adoption.py``).

Every decision is logged with its reason and saving per hour, recorded as an Event on the node and
counted in metrics. In dry-run nothing is written: the pass only reports.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from autoscaler.app.adoption import KarpenterNodes
from autoscaler.app.cluster_state import gather_plan_input
from autoscaler.app.drain import drain
from autoscaler.app.launcher import fleet_request_for
from autoscaler.app.node_state import NodeStates, NotOwnedError
from autoscaler.app.ports import (
    Clock,
    CloudError,
    CloudPort,
    ClusterError,
    ClusterPort,
    NotFoundError,
    ReplacementRequester,
)
from autoscaler.domain.disruption import (
    DRAIN_REASONS,
    REASON_OF_DRAIN,
    Blocked,
    Candidate,
    DisruptionInput,
    Reason,
    Settings,
    decide,
    in_progress,
    is_ours,
    moves,
    pods_by_node,
    simulate,
)
from autoscaler.domain.models import DISRUPTED_TAINT, Node
from autoscaler.domain.node_state import (
    NodeState,
    Owner,
    abandon,
    request_replacement,
    start_drain,
    with_empty_since,
)
from autoscaler.domain.nodeclass import NodeClass
from autoscaler.domain.nodepool import NodePool
from autoscaler.domain.ownership import OwnershipError, is_owned
from autoscaler.domain.plan import PlanInput
from autoscaler.metrics_catalog import (
    DISRUPTION_BLOCKED,
    DISRUPTION_SAVINGS,
    DRAIN_SECONDS,
    EVICTIONS_BLOCKED_BY_PDB,
    EVICTIONS_THROTTLED,
    GUARD,
    NODES_DISRUPTED,
    NODES_OF_REMOVED_NODE_POOL,
    NODES_TERMINATED,
    PODS_EVICTED,
    REASON,
    MetricsSink,
)

log = logging.getLogger("autoscaler.disruption")

@dataclass(frozen=True, slots=True)
class Options:
    dry_run: bool = False
    settings: Settings = field(default_factory=Settings)
    blocked_drain_timeout: float = 1800.0
    replacement_timeout: float = 1200.0
    drain_seconds_per_pass: float = 60.0
    adopt_karpenter: bool = False  # migration.adoptKarpenterNodes


@dataclass
class PassReport:
    """What one pass did (or, in dry-run, would do)."""

    dry_run: bool
    decided: list[Candidate] = field(default_factory=list)
    blocked: list[Blocked] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    draining: list[str] = field(default_factory=list)  # drains still going at the end of the pass
    replacing: list[str] = field(default_factory=list)  # waiting for replacement capacity
    released: list[str] = field(default_factory=list)  # given back after being blocked too long
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "dryRun": self.dry_run,
            "decisions": [{"reason": c.reason, "action": c.action, "nodes": list(c.nodes), "pods": len(c.pods),
                           "priceBefore": round(c.price_before, 6), "priceAfter": round(c.price_after, 6),
                           "savingPerHour": round(c.saving, 6),
                           "replacements": [list(r.instance_types[:5]) for r in c.replacements]}
                          for c in self.decided],
            "blocked": [{"node": b.node, "reason": b.reason, "guard": b.guard, "message": b.message}
                        for b in self.blocked],
            "removed": self.removed, "draining": self.draining, "replacing": self.replacing,
            "released": self.released, "notes": self.notes,
        }


class DisruptionService:
    """Build once per container (it holds no state between passes) and call ``run_pass``."""

    def __init__(self, *, cluster: ClusterPort, cloud: CloudPort, node_pools: list[NodePool],
                 node_classes: Mapping[str, NodeClass], cluster_name: str, region: str, clock: Clock,
                 sink: MetricsSink, options: Options | None = None,
                 replacements: ReplacementRequester | None = None,
                 sleep: Callable[[float], None] | None = None, karpenter: KarpenterNodes | None = None) -> None:
        self.cluster, self.cloud, self.clock, self.sink = cluster, cloud, clock, sink
        self.node_pools = node_pools
        self.pools = {p.name: p for p in node_pools}
        self.node_classes = node_classes
        self.cluster_name, self.region = cluster_name, region
        self.options = options or Options()
        self.replacements = replacements
        self.states = NodeStates(cluster)
        self.sleep = sleep or clock.sleep
        # Passed in by a handler that keeps it between invocations (it remembers what it logged).
        self.karpenter = karpenter or KarpenterNodes(cloud=cloud, sink=sink, adopt=self.options.adopt_karpenter)
        self.release_finalizers = self.karpenter.release_finalizers

    # ----- the pass ----------------------------------------------------------------------------
    def run_pass(self, *, deadline: float) -> PassReport:
        """One pass; ``deadline`` is a ``clock.monotonic()`` reading by which it must have returned."""
        opts = self.options
        report = PassReport(dry_run=opts.dry_run)
        now = self.clock.now()
        every = self.cluster.nodes()
        owned = {i.instance_id for i in self.cloud.owned_instances()}
        unadopted = self.karpenter.sort(every, owned=owned)
        nodes = [n for n in every if is_ours(n, self.pools) and n.name not in unadopted]
        self._removed_pools([n for n in every if not is_ours(n, self.pools)], owned=owned, report=report)
        if not opts.dry_run:
            nodes = self._reconcile_stuck_cordons(nodes, report=report)
        empty_since = self._empty_since(nodes, now)

        # Only disruptions this function started are continued here; the interruption function's own
        # drains and replacement requests are never drained, released or terminated by it.
        mine = [(n, s) for n in nodes if (s := self.states.read(n)).owner is Owner.DISRUPTION]
        if opts.dry_run:
            for n, state in mine:
                if state.drain_started is not None:
                    report.draining.append(n.name)
                elif state.replacement_requested is not None:
                    report.replacing.append(n.name)
        else:
            for n, state in mine:
                if state.drain_started is not None:
                    self._drain(n, owned=owned, deadline=deadline, report=report)
            self._check_replacements([n for n, state in mine if state.replacement_requested is not None
                                      and state.drain_started is None], owned=owned,
                                     deadline=deadline, report=report)

        snapshot = self._snapshot()
        by_name = {n.name: n for n in snapshot.nodes}
        decision = decide(DisruptionInput(snapshot=snapshot, pdbs=self.cluster.pdbs(), now=now,
                                          owned_instances=owned, empty_since=empty_since,
                                          settings=opts.settings, exclude=[*report.released, *unadopted]))
        report.notes.extend(decision.notes)
        for b in decision.blocked:
            self._blocked(b, by_name.get(b.node), report)
        for c in decision.candidates:
            self._act(c, by_name, owned=owned, deadline=deadline, report=report)
        return report

    def _reconcile_stuck_cordons(self, nodes: list[Node], *, report: PassReport) -> list[Node]:
        """Give back nodes that carry our ``karpenter.sh/disrupted:NoSchedule`` taint but no node-state
        record: a pass that died between cordoning and writing the record (or a release whose uncordon
        failed) left them cordoned, holding a budget slot forever. Both functions write the record before
        they taint, so a taint without a record is never a disruption in progress."""
        kept = []
        for n in nodes:
            tainted = any(t.key == DISRUPTED_TAINT.key and t.effect == DISRUPTED_TAINT.effect for t in n.taints)
            if tainted and not n.deleting and not self.states.read(n).in_progress:
                self._release(n, guard="Reconciled", why="cordoned by a disruption that left no node-state "
                              "record (the function stopped between cordon and record)", report=report)
                fresh = self.cluster.get_node(n.name)
                if fresh is not None:
                    kept.append(fresh)
                continue
            kept.append(n)
        return kept

    def _removed_pools(self, others: list[Node], *, owned: set[str], report: PassReport) -> None:
        """Nodes of a NodePool no longer in the cluster file (our instance, a ``karpenter.sh/nodepool``
        label naming no configured pool). Policy (docs/disruption.md): they keep running and are never
        disrupted (their pool's budgets and settings are gone with it); a drain this function had started
        on one is abandoned and the node uncordoned; each pass counts them (``NodesOfRemovedNodePool``,
        alarmed) and says so in a log line and a Warning Event, until the pool is restored or the nodes
        are removed by hand."""
        orphans = [n for n in others if n.node_pool and n.instance_id in owned]
        if orphans:  # billed per hour with data: nothing to say, nothing written (the alarm reads none as 0)
            self.sink.emit(NODES_OF_REMOVED_NODE_POOL, len(orphans))
        for n in orphans:
            pool = n.node_pool
            report.notes.append(f"{n.name}: NodePool {pool} is not in the cluster file; node left running")
            log.warning("node %s belongs to NodePool %s, which is no longer configured; left running", n.name,
                        pool, extra={"node": n.name, "nodePool": pool})
            if self.options.dry_run:
                continue
            state = self.states.read(n)
            if state.owner is Owner.DISRUPTION and state.in_progress:
                self._release(n, guard="NodePoolRemoved", why=f"NodePool {pool} was removed from the cluster "
                              "file", report=report)
            else:
                self.cluster.record_event(n, reason="NodePoolRemoved", event_type="Warning",
                                          message=f"NodePool {pool} is not in the autoscaler's cluster file: "
                                                  "this node is no longer disrupted or consolidated")

    def _snapshot(self) -> PlanInput:
        return gather_plan_input(cluster=self.cluster, cloud=self.cloud, node_pools=self.node_pools,
                                 node_classes=self.node_classes, region=self.region)

    # ----- empty-since -------------------------------------------------------------------------
    def _empty_since(self, nodes: list[Node], now: float) -> dict[str, float]:
        """Since when each empty node has been seen empty, as the annotations said at the start of the
        pass; the annotation is set on newly empty nodes and cleared on used ones. A node first seen
        empty now counts from the next pass, so it is seen empty twice before it goes. In dry-run
        (nothing written) a node without the annotation counts as empty since its creation."""
        on_node = pods_by_node(self.cluster.pods())
        out: dict[str, float] = {}
        for n in nodes:
            if in_progress(n):
                continue
            empty = not any(moves(p) for p in on_node.get(n.name, []))
            state = self.states.read(n)
            mark = state.empty_since
            if empty and mark is not None:
                out[n.name] = mark
            elif empty and self.options.dry_run:
                out[n.name] = n.created_at
            elif empty:
                self._write(n, state, with_empty_since(state, now))
            elif mark is not None and not self.options.dry_run:
                self._write(n, state, with_empty_since(state, None))
        return out

    # ----- acting on decisions -----------------------------------------------------------------
    def _blocked(self, b: Blocked, node: Node | None, report: PassReport) -> None:
        report.blocked.append(b)
        log.info("disruption blocked: %s", b.message,
                 extra={"node": b.node, "reason": b.reason, "guard": b.guard, "dryRun": self.options.dry_run})
        self.sink.emit(DISRUPTION_BLOCKED, 1, **{GUARD: b.guard})
        if node is not None and not self.options.dry_run:
            self.cluster.record_event(node, reason="DisruptionBlocked", message=f"{b.reason} blocked by {b.guard}: "
                                                                                 f"{b.message}")

    def _act(self, c: Candidate, by_name: Mapping[str, Node], *, owned: set[str], deadline: float,
             report: PassReport) -> None:
        report.decided.append(c)
        verb = "would disrupt" if self.options.dry_run else "disrupting"
        log.info("%s: %s", verb, c.describe(),
                 extra={"reason": c.reason, "action": c.action, "nodes": list(c.nodes),
                        "savingPerHour": round(c.saving, 6), "dryRun": self.options.dry_run})
        if self.options.dry_run:
            return
        self.sink.emit(DISRUPTION_SAVINGS, round(c.saving, 6))
        nodes = [by_name[n] for n in c.nodes if n in by_name]
        if c.action == "replace":
            problem = self._request_replacement(c)
            if problem is not None:
                report.notes.append(f"{', '.join(c.nodes)}: replacement not requested: {problem}")
                for n in nodes:
                    self.cluster.record_event(n, reason="DisruptionLaunchFailed", event_type="Warning",
                                              message=f"{c.reason}: replacement capacity failed: {problem}")
                return
            for n in nodes:
                state = self.states.read(n)
                self._write(n, state, request_replacement(state, owner=Owner.DISRUPTION,
                                                          reason=DRAIN_REASONS[c.reason], at=self.clock.now()))
                self.cluster.record_event(n, reason="DisruptionLaunching", message=c.describe())
            report.replacing.extend(c.nodes)
            return
        for n in nodes:
            self.cluster.record_event(n, reason="DisruptionTerminating", message=c.describe())
        self._start_drains(nodes, c.reason, owned=owned, deadline=deadline, report=report)

    def _start_drains(self, nodes: list[Node], reason: Reason, *, owned: set[str], deadline: float,
                      report: PassReport) -> None:
        started = self.clock.now()
        marked = []
        for n in nodes:
            state = self.states.read(n)
            draining = with_empty_since(start_drain(state, owner=Owner.DISRUPTION, reason=DRAIN_REASONS[reason],
                                                    at=started), None)
            try:
                # The record first: if the write fails nothing is cordoned, and if the function dies after the
                # cordon the next pass finds the record and continues the drain (never a cordon without one).
                self._write(n, state, draining, missing_ok=False)
            except (ClusterError, NotOwnedError) as exc:
                log.warning("could not start draining %s: %s", n.name, exc)
                continue
            try:
                self.cluster.add_taint(n.name, DISRUPTED_TAINT)
                self.cluster.cordon(n.name)
            except ClusterError as exc:
                log.warning("could not cordon %s (the next pass continues): %s", n.name, exc)
                report.draining.append(n.name)
                continue
            marked.append(n)
        for n in marked:
            fresh = self.cluster.get_node(n.name)
            if fresh is not None:
                self._drain(fresh, owned=owned, deadline=deadline, report=report)

    def _drain(self, node: Node, *, owned: set[str], deadline: float, report: PassReport) -> None:
        state = self.states.read(node)
        started = state.drain_started or self.clock.now()
        reason: Reason = REASON_OF_DRAIN.get(state.reason, "Underutilized")
        stop = min(deadline, self.clock.monotonic() + self.options.drain_seconds_per_pass)
        try:
            # Idempotent: a pass that wrote the record but died (or failed) before cordoning cordons here.
            self.cluster.add_taint(node.name, DISRUPTED_TAINT)
            self.cluster.cordon(node.name)
        except NotFoundError:
            return
        except ClusterError as exc:
            log.warning("could not cordon %s (the next pass continues): %s", node.name, exc)
            report.draining.append(node.name)
            return
        result = drain(node.name, cluster=self.cluster, clock=self.clock, deadline=stop, sleep=self.sleep)
        if result.evicted:
            self.sink.emit(PODS_EVICTED, len(result.evicted))
        by_pdb = [p for p in result.not_evicted if p.reason == "pdb"]
        if by_pdb:
            self.sink.emit(EVICTIONS_BLOCKED_BY_PDB, len(by_pdb))
        if result.throttled:
            self.sink.emit(EVICTIONS_THROTTLED, result.throttled)
        if result.complete:
            self._remove(node, reason, started=started, owned=owned, report=report)
            return
        waited = self.clock.now() - started
        stuck = "; ".join(f"{p.pod}: {p.reason} {p.message}".strip() for p in result.not_evicted[:5])
        if waited >= self.options.blocked_drain_timeout:
            self._release(node, guard="PDB" if by_pdb else "Drain",
                          why=f"drain blocked for {int(waited)}s ({stuck})", report=report)
            return
        report.draining.append(node.name)
        log.info("drain of %s continues next pass: %s", node.name, stuck, extra={"node": node.name})
        self.cluster.record_event(node, reason="DisruptionBlocked", event_type="Warning",
                                  message=f"drain continues next pass: {stuck}")

    def _remove(self, node: Node, reason: Reason, *, started: float, owned: set[str], report: PassReport) -> None:
        iid = node.instance_id
        if iid is not None and iid not in owned and self._already_terminated(iid):
            # Killed between TerminateInstances and deleting the Node: finish the job, never uncordon a
            # dead node nor call it someone else's.
            self.cluster.delete_node(node.name, release_finalizers=self.release_finalizers)
            report.removed.append(node.name)
            log.info("node %s: instance %s already terminated; node deleted", node.name, iid,
                     extra={"node": node.name, "instanceId": iid})
            return
        if iid is None or iid not in owned:
            # decide() never picks such a node; a drain annotation put there by hand must not cost
            # someone else's instance.
            self._release(node, guard="NotOurs", why=f"instance {iid} is not this autoscaler's", report=report)
            return
        try:
            self.cloud.terminate([iid])
        except OwnershipError as exc:
            self._release(node, guard="NotOurs", why=str(exc), report=report)
            return
        except CloudError as exc:
            # One refused TerminateInstances must not end the pass: the node stays drained, cordoned and
            # recorded, and the next pass tries again.
            report.draining.append(node.name)
            report.notes.append(f"{node.name}: TerminateInstances failed ({exc.code or exc}); retried next pass")
            log.warning("terminating %s (%s) failed; retried next pass: %s", iid, node.name, exc,
                        extra={"node": node.name, "instanceId": iid, "code": exc.code})
            self.cluster.record_event(node, reason="DisruptionTerminateFailed", event_type="Warning",
                                      message=f"TerminateInstances {iid} failed: {exc}; retried next pass")
            return
        self.cluster.record_event(node, reason="DisruptionTerminating",
                                  message=f"{reason}: drained; instance {iid} terminated, node deleted")
        self.cluster.delete_node(node.name, release_finalizers=self.release_finalizers)
        report.removed.append(node.name)
        self.sink.emit(NODES_DISRUPTED, 1, **{REASON: reason})
        self.sink.emit(NODES_TERMINATED, 1, NodePool=node.node_pool or "unknown", Reason=reason)
        self.sink.emit(DRAIN_SECONDS, max(0.0, self.clock.now() - started))
        log.info("removed node %s (%s), instance %s terminated", node.name, reason, iid,
                 extra={"node": node.name, "reason": reason, "instanceId": iid})

    def _already_terminated(self, instance_id: str) -> bool:
        """Our instance, and EC2 already took it (shutting-down or terminated)."""
        try:
            found = self.cloud.describe_instances([instance_id])
        except CloudError:
            return False
        return any(i.state in ("shutting-down", "terminated")
                   and is_owned(i.tags, self.cluster_name, adopt_karpenter=self.options.adopt_karpenter)
                   for i in found)

    def _release(self, node: Node, *, guard: str, why: str, report: PassReport) -> None:
        """Give a node back to the scheduler: the disruption is abandoned."""
        self.cluster.remove_taint(node.name, key=DISRUPTED_TAINT.key, effect=DISRUPTED_TAINT.effect)
        try:
            self.cluster.uncordon(node.name)
        except ClusterError as exc:
            log.warning("could not uncordon %s: %s", node.name, exc)
        state = self.states.read(node)
        self._write(node, state, abandon(state))
        report.released.append(node.name)
        self.sink.emit(DISRUPTION_BLOCKED, 1, **{GUARD: guard})
        log.warning("disruption of %s abandoned: %s", node.name, why, extra={"node": node.name, "guard": guard})
        self.cluster.record_event(node, reason="DisruptionBlocked", event_type="Warning",
                                  message=f"disruption abandoned, node uncordoned: {why}")

    # ----- replacements ------------------------------------------------------------------------
    def _request_replacement(self, c: Candidate) -> str | None:
        """Ask the provisioner function for the candidate's replacement capacity (the same request the
        interruption function sends); without one configured, launch it here. None when requested,
        else why not."""
        if self.replacements is not None:
            event_id = f"disruption-{c.reason.lower()}-{'-'.join(c.nodes)}-{int(self.clock.now())}"
            try:
                if self.replacements.request_replacement(source="disruption", nodes=c.nodes, unavailable=(),
                                                         event_id=event_id):
                    return None
            except CloudError as exc:
                return f"asking the provisioner failed: {exc}"
        return self.launch_replacements(c)

    def launch_replacements(self, c: Candidate) -> str | None:
        """Launch the candidate's replacement nodes directly (the provisioner's own steps)."""
        for launch in c.replacements:
            request = fleet_request_for(launch, cluster_name=self.cluster_name, node_pools=self.pools,
                                        node_classes=self.node_classes)
            result = self.cloud.launch(request)
            if not result.launched:
                errors = "; ".join(f"{e.code}: {e.message}" for e in result.errors[:3]) or "nothing launched"
                return f"launch for NodePool {launch.node_pool} failed ({errors})"
            log.info("launched replacement %s for %s", result.launched[0].instance_id, ", ".join(c.nodes))
        return None

    def _check_replacements(self, waiting: list[Node], *, owned: set[str], deadline: float,
                            report: PassReport) -> None:
        """Nodes that requested replacement capacity in the same pass wait for it together: once their
        pods fit on registered nodes without any launch, their drain starts."""
        if not waiting:
            return
        groups: dict[float, list[Node]] = defaultdict(list)
        for n in waiting:
            groups[self.states.read(n).replacement_requested or 0.0].append(n)
        snapshot = self._snapshot()
        now = self.clock.now()
        for requested, group in sorted(groups.items()):
            names = [n.name for n in group]
            reason: Reason = REASON_OF_DRAIN.get(self.states.read(group[0]).reason, "Underutilized")
            if simulate(snapshot, names).fits:
                log.info("replacement for %s has registered; draining", ", ".join(names))
                self._start_drains(group, reason, owned=owned, deadline=deadline, report=report)
            elif now - requested >= self.options.replacement_timeout:
                for n in group:
                    state = self.states.read(n)
                    self._write(n, state, abandon(state))
                    self.cluster.record_event(n, reason="DisruptionBlocked", event_type="Warning",
                                              message="replacement capacity did not register in time; "
                                                      "disruption abandoned")
                report.notes.append(f"{', '.join(names)}: replacement did not register in time; abandoned")
            else:
                report.replacing.extend(names)
                for n in group:
                    self.cluster.record_event(n, reason="DisruptionWaitingReadiness",
                                              message="waiting for replacement capacity to register")

    # ----- helpers -----------------------------------------------------------------------------
    def _write(self, node: Node, old: NodeState, new: NodeState, *, missing_ok: bool = True) -> None:
        """Store this function's part of the node's record; failures are logged (or raised with
        ``missing_ok=False``, where the caller must not go on without the record)."""
        try:
            self.states.write(node, old, new, by=Owner.DISRUPTION)
        except (ClusterError, NotOwnedError) as exc:
            if not missing_ok:
                raise
            log.warning("could not record the state of node %s: %s", node.name, exc)

