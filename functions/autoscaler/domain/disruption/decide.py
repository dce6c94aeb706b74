"""The disruption decision of one pass: every method in Karpenter's order, within budgets and guards.

Repair first (forceful, outside budgets), then the nodes of Capacity Blocks about to end (replaced
first, outside budgets: EC2 reclaims them whatever the budgets say), then the excess of static
NodePools, then per node the first reason that applies: Empty, Expired, Drifted, Underutilized. Empty
nodes are deleted; Expired and Drifted nodes are replaced (capacity for their pods first, or a template
node for a static pool); consolidation runs only when nothing else is being disrupted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from autoscaler.domain.disruption.budgets import Budgets
from autoscaler.domain.disruption.consolidation import consolidate, consolidation_reason
from autoscaler.domain.disruption.drift import drift_hashes, drifted
from autoscaler.domain.disruption.expiration import expired
from autoscaler.domain.disruption.guards import guard_for
from autoscaler.domain.disruption.model import (
    Blocked,
    Candidate,
    Decision,
    DisruptionInput,
    Reason,
    in_progress,
    is_ours,
    moves,
    node_prices,
    pods_by_node,
)
from autoscaler.domain.disruption.repair import repair_due, unhealthy_pools
from autoscaler.domain.disruption.simulation import simulate
from autoscaler.domain.disruption.static import overprovisioned
from autoscaler.domain.keys import CAPACITY_RESERVATION_ID_LABEL
from autoscaler.domain.models import Node
from autoscaler.domain.nodepool import NodePool
from autoscaler.domain.plan import Launch
from autoscaler.domain.scheduling import plan
from autoscaler.domain.static_pools import count, template_launch


class _Pass:
    def __init__(self, inp: DisruptionInput) -> None:
        self.inp, self.snap, self.now, self.settings = inp, inp.snapshot, inp.now, inp.settings
        self.pools = {p.name: p for p in self.snap.node_pools}
        self.out = Decision()
        self.on_node = pods_by_node(self.snap.pods)
        self.budgets = Budgets(self.pools, self.snap.nodes, self.now)
        self.owned = set(inp.owned_instances)
        self.prices = node_prices(self.snap.nodes, self.snap.offerings)
        self.pool_of = {n.name: n.node_pool for n in self.snap.nodes}
        self.handled: set[str] = set()
        self.static_added: dict[str, int] = {}
        self.drift_hashes: dict[str, dict[str, str]] = {}  # by NodePool: one pass, one hash per pool and class

    def ours(self) -> list[Node]:
        return [n for n in sorted(self.snap.nodes, key=lambda n: n.name) if is_ours(n, self.pools)
                and n.name not in self.inp.exclude and n.name not in self.handled]

    def moving(self, node: Node) -> tuple[str, ...]:
        return tuple(sorted(p.key for p in self.on_node.get(node.name, []) if moves(p)))

    def not_ours(self, node: Node, reason: Reason) -> bool:
        if node.instance_id in self.owned:
            return False
        self.out.blocked.append(Blocked(node.name, reason, "NotOurs",
                                        f"instance {node.instance_id or '(no providerID)'} of node {node.name} does "
                                        f"not carry this cluster's ownership tags"))
        return True

    def admit(self, nodes: Iterable[str], reason: Reason) -> bool:
        names = list(nodes)
        if self.budgets.fits((self.pool_of[n] for n in names), reason):
            self.budgets.take(self.pool_of[n] for n in names)
            return True
        for n in names:
            self.out.blocked.append(Blocked(n, reason, "Budget", f"NodePool {self.pool_of[n]}'s disruption budget "
                                                                 f"for {reason} allows no more nodes now"))
        return False

    # ----- methods ------------------------------------------------------------------------------
    def repair(self) -> None:
        paused = unhealthy_pools(n for n in self.snap.nodes if is_ours(n, self.pools))
        for node in self.ours():
            if node.deleting or in_progress(node):
                continue
            why = repair_due(node, now=self.now)
            if why is None or self.not_ours(node, "Unhealthy"):
                continue
            pool = self.pool_of[node.name]
            if pool in paused:
                self.out.blocked.append(Blocked(node.name, "Unhealthy", "UnhealthyNodePool", paused[pool]))
                continue
            self.handled.add(node.name)
            self.budgets.take([pool])
            self.out.candidates.append(Candidate("Unhealthy", "delete", (node.name,), self.moving(node),
                                                 self.prices[node.name] or 0.0, note=why))

    def capacity_blocks(self, leaving: list[str]) -> None:
        """Nodes in a Capacity Block that ends within 40 minutes (Karpenter's expiration controller):
        replaced first, then drained, like an interruption: neither budgets nor do-not-disrupt hold it
        (EC2 reclaims the instances at the end); PDBs still pace the drain's evictions."""
        for node in self.ours():
            why = self.inp.expiring_reservations.get(node.labels.get(CAPACITY_RESERVATION_ID_LABEL, ""))
            if why is None or node.deleting or in_progress(node) or self.not_ours(node, "CapacityBlockExpiring"):
                continue
            self.handled.add(node.name)
            self.budgets.take([self.pool_of[node.name]])
            sim = simulate(self.snap, [*leaving, node.name])
            leaving.append(node.name)
            taken = {k for c in self.out.candidates for k in c.pods}
            launches = tuple(ln for ln in sim.launches if not set(ln.pods) <= taken)
            self.out.candidates.append(Candidate(
                "CapacityBlockExpiring", "replace" if launches else "delete", (node.name,),
                tuple(k for k in sim.pods if k not in taken), self.prices[node.name] or 0.0,
                sum(ln.hourly_price for ln in launches), launches, why))

    def scale_down_static(self) -> None:
        for pool in self.snap.node_pools:
            for node in overprovisioned(pool, self.snap, on_node=self.on_node):
                if node.name in self.inp.exclude or self.not_ours(node, "Overprovisioned"):
                    continue
                self.handled.add(node.name)
                self.budgets.take([pool.name])
                self.out.candidates.append(Candidate(
                    "Overprovisioned", "delete", (node.name,), self.moving(node), self.prices[node.name] or 0.0,
                    note=f"NodePool {pool.name} has more nodes than its {pool.replicas} replicas"))

    def classify(self) -> tuple[dict[Reason, list[Node]], dict[str, str]]:
        snap = self.snap
        # Nodes the planner would give pending pods to are about to be used: leave them alone.
        receiving: set[str] = set()
        if any(p.is_pending for p in snap.pods):
            receiving = set(plan(replace(snap, in_flight=[])).existing.values())
        by_reason: dict[Reason, list[Node]] = {"Empty": [], "Expired": [], "Drifted": [], "Underutilized": []}
        why: dict[str, str] = {}
        for node in self.ours():
            if in_progress(node):
                continue
            pool = self.pools[self.pool_of[node.name]]
            pods = self.on_node.get(node.name, [])
            forceful = self.settings.forceful_expiry and expired(node, pool, now=self.now)
            reason = "Expired" if forceful else consolidation_reason(node, pods, pool, now=self.now,
                                                                     empty_since=self.inp.empty_since)
            if reason not in ("Empty", "Expired"):
                drift = self._drift(node, pool) if self.settings.drift else None
                if expired(node, pool, now=self.now):
                    reason = "Expired"
                elif drift is not None:
                    reason, why[node.name] = "Drifted", drift
            if reason is None or (reason in ("Empty", "Underutilized") and node.name in receiving):
                continue
            if self.not_ours(node, reason):
                continue
            # Karpenter v1 expiry is forceful: neither do-not-disrupt nor a PDB keeps the node (the drain
            # still evicts through the Eviction API until terminationGracePeriod).
            guard = None if forceful else guard_for(node, pods, pdbs=self.inp.pdbs, all_pods=snap.pods,
                                                    settings=self.settings)
            if guard is not None:
                self.out.blocked.append(Blocked(node.name, reason, guard[0], guard[1]))
                continue
            by_reason[reason].append(node)
        return by_reason, why

    def _drift(self, node: Node, pool: NodePool) -> str | None:
        instance = self.inp.instances.get(node.instance_id or "")
        node_class = self.snap.node_classes.get(pool.node_class_ref)
        hashes = self.drift_hashes.get(pool.name)
        if hashes is None:
            hashes = self.drift_hashes[pool.name] = drift_hashes(pool, node_class)
        return drifted(node, pool, node_class=node_class, instance=instance,
                       resolved=self.inp.resolved.get(pool.node_class_ref), hashes=hashes)

    def replace_each(self, nodes: list[Node], reason: Reason, why: Mapping[str, str], leaving: list[str]) -> None:
        """Expired / Drifted: one candidate per node, oldest first, each replaced before its drain."""
        for node in sorted(nodes, key=lambda n: (n.created_at, n.name)):
            pool = self.pools[self.pool_of[node.name]]
            if pool.is_static:
                self._replace_static(node, pool, reason, why.get(node.name, ""))
                continue
            if reason == "Expired" and self.settings.forceful_expiry:
                self.budgets.take([pool.name])  # outside budgets, but it counts against the other reasons
            elif not self.admit([node.name], reason):
                continue
            sim = simulate(self.snap, [*leaving, node.name])
            leaving.append(node.name)
            # Earlier leaving nodes' pods are in this simulation too; their launches were already planned.
            taken = {k for c in self.out.candidates for k in c.pods}
            launches = tuple(ln for ln in sim.launches if not set(ln.pods) <= taken)
            notes = [why.get(node.name, "")]
            if sim.unschedulable:
                notes.append(f"{len(sim.unschedulable)} pod(s) fit nowhere and will stay pending")
            mine = tuple(k for k in sim.pods if k not in taken)
            self.out.candidates.append(Candidate(
                reason, "replace" if launches else "delete", (node.name,), mine, self.prices[node.name] or 0.0,
                sum(ln.hourly_price for ln in launches), launches, "; ".join(n for n in notes if n)))

    def _replace_static(self, node: Node, pool: NodePool, reason: Reason, why: str) -> None:
        """A static pool's node is replaced by a template node, never past ``limits.nodes`` (counting the
        node being replaced) and only once the pool is not above its replicas (Karpenter's StaticDrift)."""
        counted = count(pool, self.snap)
        limit = pool.limits.get("nodes")
        if counted.staying > (pool.replicas or 0):
            return  # the excess goes first (scale_down_static)
        if limit is not None and counted.total + self.static_added.get(pool.name, 0) >= limit:
            self.out.blocked.append(Blocked(node.name, reason, "NodeLimit", f"NodePool {pool.name}'s limits.nodes "
                                            f"({limit}) leaves no room for a replacement node"))
            return
        launch: Launch | None = template_launch(pool, self.snap)
        if launch is None or not self.admit([node.name], reason):
            return
        self.static_added[pool.name] = self.static_added.get(pool.name, 0) + 1
        self.out.candidates.append(Candidate(reason, "replace", (node.name,), self.moving(node),
                                             self.prices[node.name] or 0.0, launch.hourly_price, (launch,), why))


def decide(inp: DisruptionInput) -> Decision:
    """Candidates to act on this pass (within budgets) and the nodes guards kept."""
    p = _Pass(inp)
    if inp.settings.node_repair:
        p.repair()
    leaving: list[str] = []
    p.capacity_blocks(leaving)
    p.scale_down_static()
    by_reason, why = p.classify()
    out = p.out
    for node in sorted(by_reason["Empty"], key=lambda n: -(p.prices[n.name] or 0.0)):
        if p.admit([node.name], "Empty"):
            out.candidates.append(Candidate("Empty", "delete", (node.name,), (), p.prices[node.name] or 0.0))
    p.replace_each(by_reason["Expired"], "Expired", why, leaving)
    p.replace_each(by_reason["Drifted"], "Drifted", why, leaving)
    under = by_reason["Underutilized"]
    if under:
        busy = any(in_progress(n) for n in inp.snapshot.nodes if is_ours(n, p.pools) and n.name not in inp.exclude)
        if busy or out.candidates:
            out.notes.append("consolidation waits: other nodes are being disrupted")
        else:
            best = consolidate(inp.snapshot, under, prices=p.prices, settings=inp.settings, budgets=p.budgets,
                               pool_of=p.pool_of)
            if best is not None and p.admit(best.nodes, "Underutilized"):
                out.candidates.append(best)
            elif best is None:
                out.notes.append(f"consolidation: no cheaper arrangement for {len(under)} underutilized node(s)")
    return out

