"""One pass of the disruption function, through the ports: keep the ``empty-since`` annotations true,
carry on with disruptions already under way, resolve what each EC2NodeClass selects now (for drift),
decide new ones (``disruption.decide``: repair, static scale-down, empty, expired, drifted,
underutilized) and carry them out (``disruption_actions``).

Order of work for a node, every step recorded in node annotations so a later pass (another Lambda
container) continues where this one stopped:

1. ``replace`` decisions (Expired / Drifted with pods that need new capacity, Underutilized/Replace) request
   replacement capacity first and annotate ``replacement-requested``; later passes check whether the
   node's pods now fit on registered nodes (no in-flight capacity counted) and only then go on;
2. taint ``karpenter.sh/disrupted:NoSchedule``, cordon, annotate ``drain-started`` / ``drain-reason``;
3. drain through the Eviction API (resumable; bounded per pass and by the Lambda's remaining time);
   a drain that a PDB blocks leaves the node cordoned for the next pass, and one blocked for longer
   than ``blocked_drain_timeout`` is released (taint, cordon and annotations removed);
4. terminate the instance (only one with this cluster's ownership tags) and delete the Node.

A repair (``Unhealthy``) skips 1 and 3: its pods are deleted at once and the instance terminated.

Every decision is logged with its reason and saving per hour, recorded as an Event on the node and
counted in metrics. In dry-run nothing is written: the pass only reports.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime

from autoscaler.app.adoption import KarpenterNodes
from autoscaler.app.cluster_state import gather_plan_input
from autoscaler.app.disruption_actions import DisruptionActions, Options, PassReport
from autoscaler.app.node_state import NodeStates
from autoscaler.app.ports import Clock, CloudError, CloudPort, ClusterPort, ReplacementRequester
from autoscaler.domain.disruption import (
    DRAIN_REASONS,
    Blocked,
    Candidate,
    DisruptionInput,
    decide,
    in_progress,
    is_ours,
    moves,
    pods_by_node,
)
from autoscaler.domain.errors import ConfigError
from autoscaler.domain.fleet import ResolvedNodeClass
from autoscaler.domain.keys import CAPACITY_RESERVATION_ID_LABEL
from autoscaler.domain.models import DISRUPTED_TAINT, Node
from autoscaler.domain.node_state import Owner, request_replacement, with_empty_since
from autoscaler.domain.nodeclass import NodeClass
from autoscaler.domain.nodepool import NodePool
from autoscaler.domain.plan import PlanInput
from autoscaler.domain.reservations import CAPACITY_BLOCK_EXPIRATION_LEAD
from autoscaler.metrics_catalog import (
    DISRUPTION_BLOCKED,
    DISRUPTION_SAVINGS,
    GUARD,
    NODES_OF_REMOVED_NODE_POOL,
    MetricsSink,
)

__all__ = ["DisruptionService", "Options", "PassReport"]

log = logging.getLogger("autoscaler.disruption")


class DisruptionService(DisruptionActions):
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
        instances = {i.instance_id: i for i in self.cloud.owned_instances()}
        owned = set(instances)
        unadopted = self.karpenter.sort(every, owned=owned)
        nodes = [n for n in every if is_ours(n, self.pools) and n.name not in unadopted]
        self._removed_pools([n for n in every if not is_ours(n, self.pools)], owned=owned, deadline=deadline,
                            report=report)
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
                                          settings=opts.settings, exclude=[*report.released, *unadopted],
                                          instances=instances, resolved=self._resolved(report),
                                          expiring_reservations=self._expiring_blocks(nodes, report)))
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

    def _removed_pools(self, others: list[Node], *, owned: set[str], deadline: float, report: PassReport) -> None:
        """Nodes of a NodePool no longer in the cluster file (our instance, a ``karpenter.sh/nodepool`` label
        naming no configured pool). As Karpenter deletes a deleted NodePool's NodeClaims: each is drained
        gracefully through the Eviction API (PDBs respected; no replacement first, its pods go pending and
        the provisioner places them by the NodePools left), never given back, then its instance terminated
        and its Node deleted. Not within budgets (they went with the pool). Counted each pass
        (``NodesOfRemovedNodePool``) with a Warning Event when the drain starts (docs/migration.md)."""
        orphans = [n for n in others if n.node_pool and n.instance_id in owned and not n.deleting]
        if orphans:  # billed per hour with data: nothing to say, nothing written (the alarm reads none as 0)
            self.sink.emit(NODES_OF_REMOVED_NODE_POOL, len(orphans))
        starting = []
        for n in orphans:
            pool = n.node_pool
            state = self.states.read(n)
            if self.options.dry_run:
                report.notes.append(f"{n.name}: NodePool {pool} is not in the cluster file; would be drained")
                continue
            if state.owner is Owner.DISRUPTION and state.drain_started is not None:
                current = n
                if state.reason != DRAIN_REASONS["NodePoolRemoved"]:
                    # A drain begun for another reason while the pool existed: finish it as the pool's removal.
                    self._write(n, state, replace(state, reason=DRAIN_REASONS["NodePoolRemoved"]))
                    current = self.cluster.get_node(n.name) or n
                self._drain(current, owned=owned, deadline=deadline, report=report)
                continue
            if state.in_progress:
                continue  # the interruption function's, or a replacement being waited for
            report.notes.append(f"{n.name}: NodePool {pool} is not in the cluster file; draining and deleting it")
            log.warning("node %s belongs to NodePool %s, which is no longer configured: draining and deleting it",
                        n.name, pool, extra={"node": n.name, "nodePool": pool})
            self.cluster.record_event(n, reason="NodePoolRemoved", event_type="Warning",
                                      message=f"NodePool {pool} is not in the autoscaler's cluster file: this node "
                                              "is drained (PodDisruptionBudgets respected) and deleted")
            starting.append(n)
        if starting:
            self._start_drains(starting, "NodePoolRemoved", owned=owned, deadline=deadline, report=report)

    def _snapshot(self) -> PlanInput:
        return gather_plan_input(cluster=self.cluster, cloud=self.cloud, node_pools=self.node_pools,
                                 node_classes=self.node_classes, region=self.region)

    def _resolved(self, report: PassReport) -> dict[str, ResolvedNodeClass]:
        """What each EC2NodeClass's selector terms select now, for AMI / subnet / security-group drift. A
        node class that cannot be resolved (an API error, nothing selected) drifts nobody this pass."""
        if not self.options.settings.drift:
            return {}
        out = {}
        for name in sorted({p.node_class_ref for p in self.node_pools}):
            node_class = self.node_classes.get(name)
            if node_class is None:
                continue
            try:
                out[name] = self.cloud.resolve_node_class(node_class)
            except (CloudError, ConfigError) as exc:
                report.notes.append(f"EC2NodeClass {name}: not resolved, no AMI/network drift this pass ({exc})")
                log.warning("EC2NodeClass %s could not be resolved for drift: %s", name, exc)
        return out

    def _expiring_blocks(self, nodes: list[Node], report: PassReport) -> dict[str, str]:
        """The Capacity Blocks our nodes run in that end within 40 minutes, each with a sentence saying
        when. One DescribeCapacityReservations per pass, only when a node runs in a reservation."""
        ids = sorted({rid for n in nodes if (rid := n.labels.get(CAPACITY_RESERVATION_ID_LABEL))})
        if not ids:
            return {}
        try:
            found = self.cloud.describe_capacity_reservations(ids)
        except CloudError as exc:
            report.notes.append(f"capacity reservations {', '.join(ids)} not described this pass ({exc})")
            log.warning("capacity reservations not described: %s", exc)
            return {}
        now = self.clock.now()
        return {r.reservation_id: (f"Capacity Block {r.reservation_id} ends at "
                                   f"{datetime.fromtimestamp(r.end_time or now, UTC).isoformat()}; its nodes leave "
                                   f"{int(CAPACITY_BLOCK_EXPIRATION_LEAD // 60)} min before")
                for r in found if r.expiring(now)}

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
        if c.reason == "Unhealthy":
            for n in nodes:
                self._repair(n, c, owned=owned, report=report)
            return
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

