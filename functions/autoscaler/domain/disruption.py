"""Disruption decisions: which of the autoscaler's nodes to remove or replace now, and why not the others.

Pure: it reads a ``PlanInput`` (nodes, pods, NodePools, offerings), the PodDisruptionBudgets, the
clock reading and the node annotations the disruption service maintains, and answers with
``Candidate`` s (reason, action, saving per hour, replacement launches) and ``Blocked`` entries (the
guard that kept a node). The service in ``disruption_service`` carries the decisions out.

Karpenter's semantics (see docs/disruption.md for the differences):
- only nodes with the ``karpenter.sh/nodepool`` label of a configured NodePool whose instance carries
  this cluster's ownership tags;
- **Empty**: only DaemonSet, mirror and finished pods, observed empty for ``consolidateAfter``;
- **Expired**: older than ``expireAfter``; replacement capacity is planned for its pods;
- **Underutilized** (``WhenEmptyOrUnderutilized``, after ``consolidateAfter`` without pod changes):
  removed when the planner places all its pods on the remaining nodes, replaced when one cheaper node
  holds them; several nodes at once (multi-node) before one at a time, candidates ordered by saving
  per disrupted pod; spot is never replaced by spot unless enabled, and then (one node at a time)
  only with at least 15 cheaper spot types, launched with the 15 cheapest (Karpenter's rule);
- guards: budgets per NodePool and reason (default ``nodes: 10%``, cron windows), the
  ``karpenter.sh/do-not-disrupt`` annotation on pods and nodes, PDBs that allow no disruption now,
  and pods without a controller (bare pods).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from autoscaler.domain.cron import window_open
from autoscaler.domain.keys import CAPACITY_TYPE_LABEL, DO_NOT_DISRUPT, INSTANCE_TYPE_LABEL
from autoscaler.domain.models import DISRUPTED_TAINT, Node, Offering, Pod, PodDisruptionBudget
from autoscaler.domain.node_state import read_state
from autoscaler.domain.nodepool import Budget, NodePool
from autoscaler.domain.plan import Launch, PlanInput
from autoscaler.domain.scheduling import plan

Reason = Literal["Empty", "Expired", "Underutilized"]
CandidateAction = Literal["delete", "replace"]  # what happens to the nodes of a Candidate
# Karpenter's MinInstanceTypesForSpotToSpotConsolidation: cheaper spot types a single-node spot-to-spot
# replacement needs, and the number it is launched with.
MIN_SPOT_TO_SPOT_TYPES = 15
Guard = Literal["Budget", "DoNotDisrupt", "PDB", "BarePod", "NotOurs"]

DRAIN_REASONS: dict[Reason, str] = {"Empty": "empty", "Expired": "expired", "Underutilized": "underutilized"}
REASON_OF_DRAIN = {v: k for k, v in DRAIN_REASONS.items()}


@dataclass(frozen=True, slots=True)
class Settings:
    allow_bare_pods: bool = False
    spot_to_spot_consolidation: bool = False
    max_multi_node_candidates: int = 10  # nodes tried together in multi-node consolidation


@dataclass(frozen=True, slots=True)
class Candidate:
    """Nodes to disrupt together. ``replacements`` (for ``replace``) launch and register first."""

    reason: Reason
    action: CandidateAction
    nodes: tuple[str, ...]
    pods: tuple[str, ...]  # the pods that move
    price_before: float  # USD/hour of ``nodes``
    price_after: float = 0.0  # USD/hour of ``replacements``
    replacements: tuple[Launch, ...] = ()
    note: str = ""

    @property
    def saving(self) -> float:
        return self.price_before - self.price_after

    @property
    def saving_per_pod(self) -> float:
        return self.saving / max(1, len(self.pods))

    def describe(self) -> str:
        what = ("delete" if self.action == "delete" else
                f"replace with {len(self.replacements)} node(s) of "
                f"{'/'.join(r.instance_types[0] for r in self.replacements)}")
        text = (f"{self.reason}: {what} {', '.join(self.nodes)} ({len(self.pods)} pod(s) to move, "
                f"${self.price_before:.4f}/h -> ${self.price_after:.4f}/h, saving ${self.saving:.4f}/h)")
        return f"{text}; {self.note}" if self.note else text


@dataclass(frozen=True, slots=True)
class Blocked:
    node: str
    reason: Reason
    guard: Guard
    message: str


@dataclass
class Decision:
    candidates: list[Candidate] = field(default_factory=list)
    blocked: list[Blocked] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class DisruptionInput:
    """``empty_since``: node -> epoch seconds it has been seen empty since (the service reads it from
    the ``empty-since`` annotation as it was at the start of the pass). ``owned_instances``: instance
    ids with this cluster's ownership tags."""

    snapshot: PlanInput
    pdbs: list[PodDisruptionBudget]
    now: float
    owned_instances: Collection[str]
    empty_since: Mapping[str, float] = field(default_factory=dict)
    settings: Settings = field(default_factory=Settings)
    exclude: Collection[str] = ()  # nodes this pass already handled (e.g. just released)


# --- small facts about nodes and pods ------------------------------------------------------------

def moves(pod: Pod) -> bool:
    """Pods that must find another node when theirs goes; DaemonSet, mirror, finished and deleting
    pods stay (or go) with it."""
    return not (pod.is_daemonset_pod or pod.is_mirror or pod.is_finished or pod.deleting)


def is_ours(node: Node, node_pools: Mapping[str, NodePool]) -> bool:
    return node.node_pool in node_pools


def in_progress(node: Node) -> bool:
    """Already being disrupted (by either function): replacement requested, drain started, tainted or
    deleting."""
    return (node.deleting or read_state(node.annotations).in_progress
            or any(t.key == DISRUPTED_TAINT.key and t.effect == DISRUPTED_TAINT.effect for t in node.taints))


def annotated_true(annotations: Mapping[str, str], key: str) -> bool:
    return annotations.get(key, "").strip().lower() == "true"


def node_price(node: Node, offerings: Iterable[Offering]) -> float | None:
    """USD/hour of the node's (instance type, zone, capacity type); None when unknown."""
    it, zone = node.labels.get(INSTANCE_TYPE_LABEL), node.zone
    ct = node.labels.get(CAPACITY_TYPE_LABEL, "on-demand")
    prices = [o.price for o in offerings if o.instance_type == it and o.capacity_type == ct
              and (zone is None or o.zone == zone)]
    return min(prices) if prices else None


def pods_by_node(pods: Iterable[Pod]) -> dict[str, list[Pod]]:
    out: dict[str, list[Pod]] = defaultdict(list)
    for p in pods:
        if p.node_name:
            out[p.node_name].append(p)
    return out


# --- PodDisruptionBudgets --------------------------------------------------------------------------

def _scaled(value: int | str, total: int) -> int:
    if isinstance(value, int):
        return value
    if value.endswith("%"):
        return math.ceil(int(value[:-1]) * total / 100)  # the API server rounds percentages up
    return int(value)


def pdb_selects(pdb: PodDisruptionBudget, pod: Pod) -> bool:
    return pdb.namespace == pod.namespace and pdb.selector is not None and pdb.selector.matches(pod.labels)


def disruptions_allowed(pdb: PodDisruptionBudget, pods: Iterable[Pod]) -> tuple[int, int, int]:
    """(disruptionsAllowed, currentHealthy, desiredHealthy) by the disruption controller's arithmetic."""
    live = [p for p in pods if pdb_selects(pdb, p) and not p.is_finished]
    expected = len(live)
    healthy = sum(1 for p in live if p.ready and not p.deleting)
    if pdb.max_unavailable is not None:
        desired = max(0, expected - _scaled(pdb.max_unavailable, expected))
    elif pdb.min_available is not None:
        desired = _scaled(pdb.min_available, expected)
    else:
        desired = expected
    return max(0, healthy - desired), healthy, desired


def pdb_problem(pod: Pod, pdbs: Iterable[PodDisruptionBudget], all_pods: list[Pod]) -> str | None:
    """Why evicting ``pod`` would be refused now, or None (the API server's eviction rules)."""
    matching = [b for b in pdbs if pdb_selects(b, pod)]
    if not matching or pod.phase in ("Pending", "Succeeded", "Failed"):
        return None
    if len(matching) > 1:
        return f"pod {pod.key} is selected by more than one PDB ({', '.join(b.name for b in matching)})"
    budget = matching[0]
    allowed, healthy, desired = disruptions_allowed(budget, all_pods)
    if not pod.ready and healthy >= desired > 0:
        return None  # unhealthy pods may go while the budget is met
    if allowed <= 0:
        return (f"PDB {budget.namespace}/{budget.name} allows no disruption of pod {pod.key} "
                f"({healthy} healthy, {desired} needed)")
    return None


# --- guards ------------------------------------------------------------------------------------------

def guard_for(node: Node, pods: list[Pod], *, pdbs: list[PodDisruptionBudget], all_pods: list[Pod],
              settings: Settings) -> tuple[Guard, str] | None:
    """The first guard that keeps ``node`` (with its ``pods``) from voluntary disruption, or None."""
    if annotated_true(node.annotations, DO_NOT_DISRUPT):
        return "DoNotDisrupt", f"node {node.name} has annotation {DO_NOT_DISRUPT}=true"
    moving = [p for p in pods if moves(p)]
    for p in moving:
        if annotated_true(p.annotations, DO_NOT_DISRUPT):
            return "DoNotDisrupt", f"pod {p.key} has annotation {DO_NOT_DISRUPT}=true"
    if not settings.allow_bare_pods:
        for p in moving:
            if p.owner is None:
                return "BarePod", f"pod {p.key} has no controller and would not come back after eviction"
    for p in moving:
        problem = pdb_problem(p, pdbs, all_pods)
        if problem:
            return "PDB", problem
    return None


# --- budgets -----------------------------------------------------------------------------------------

def budget_active(budget: Budget, now: float) -> bool:
    if budget.schedule is None or budget.duration is None:
        return True
    return window_open(budget.schedule, budget.duration, now)


def allowed_disruptions(pool: NodePool, reason: Reason, *, node_count: int, now: float) -> int:
    """How many of the pool's ``node_count`` nodes may be disrupting at once for ``reason``: the
    minimum over the budgets active now that apply to it (percentages round up, as Karpenter does).
    A pool whose budgets are all inactive or for other reasons is not limited."""
    limits = []
    for b in pool.disruption.budgets:
        if b.reasons is not None and reason not in b.reasons:
            continue
        if not budget_active(b, now):
            continue
        limits.append(b.nodes if isinstance(b.nodes, int) else math.ceil(int(b.nodes[:-1]) * node_count / 100))
    return min(limits) if limits else node_count


class _Budgets:
    def __init__(self, pools: Mapping[str, NodePool], nodes: list[Node], now: float) -> None:
        self._pools, self._now = pools, now
        self._count: dict[str, int] = defaultdict(int)
        self._used: dict[str, int] = defaultdict(int)
        for n in nodes:
            pool = n.node_pool
            if pool in pools:
                self._count[pool] += 1
                if in_progress(n):
                    self._used[pool] += 1

    def remaining(self, pool: str, reason: Reason) -> int:
        allowed = allowed_disruptions(self._pools[pool], reason, node_count=self._count[pool], now=self._now)
        return max(0, allowed - self._used[pool])

    def fits(self, pools: Iterable[str], reason: Reason) -> bool:
        need: dict[str, int] = defaultdict(int)
        for p in pools:
            need[p] += 1
        return all(self.remaining(p, reason) >= k for p, k in need.items())

    def take(self, pools: Iterable[str]) -> None:
        for p in pools:
            self._used[p] += 1


# --- simulation ------------------------------------------------------------------------------------

def without(snapshot: PlanInput, leaving: Collection[str]) -> PlanInput:
    """The snapshot as the planner should see it with ``leaving`` gone: their moving pods pending
    again, other pending pods and in-flight instances left out (consolidation counts on registered
    capacity only, and pending pods are the provisioner's)."""
    gone = set(leaving)
    pods = []
    for p in snapshot.pods:
        if p.node_name in gone:
            if moves(p):
                pods.append(replace(p, node_name=None, phase="Pending", ready=False))
        elif not p.is_pending:
            pods.append(p)
    return replace(snapshot, pods=pods, nodes=[n for n in snapshot.nodes if n.name not in gone], in_flight=[])


def _cheapest(offerings: Iterable[Offering], launch: Launch) -> dict[str, float]:
    out: dict[str, float] = {}
    zones = set(launch.zones)
    for o in offerings:
        if o.capacity_type == launch.capacity_type and o.available and (not zones or o.zone in zones):
            out[o.instance_type] = min(o.price, out.get(o.instance_type, math.inf))
    return out


@dataclass(frozen=True, slots=True)
class Simulation:
    pods: tuple[str, ...]
    launches: tuple[Launch, ...]
    unschedulable: tuple[str, ...]

    @property
    def fits(self) -> bool:
        """Everything moves onto registered nodes with no launch."""
        return not self.launches and not self.unschedulable


def simulate(snapshot: PlanInput, leaving: Collection[str]) -> Simulation:
    """Where the pods of ``leaving`` would go: existing nodes, new launches, or nowhere."""
    sim = without(snapshot, leaving)
    result = plan(sim)
    moving = tuple(sorted(p.key for p in sim.pods if p.is_pending))
    return Simulation(moving, tuple(result.launches), tuple(u.pod for u in result.unschedulable))


def consolidation(snapshot: PlanInput, nodes: list[Node], *, prices: Mapping[str, float],
                  settings: Settings) -> Candidate | None:
    """Delete ``nodes`` when their pods fit elsewhere, or replace them with one cheaper node."""
    names = tuple(n.name for n in nodes)
    before = sum(prices[n] for n in names)
    sim = simulate(snapshot, names)
    if sim.unschedulable:
        return None
    if not sim.launches:
        return Candidate("Underutilized", "delete", names, sim.pods, before)
    if len(sim.launches) != 1:
        return None
    launch = sim.launches[0]
    all_spot = all(n.labels.get(CAPACITY_TYPE_LABEL) == "spot" for n in nodes)
    if all_spot and launch.capacity_type == "spot" and not settings.spot_to_spot_consolidation:
        return None
    # EC2 may pick any listed type: keep only those cheaper than what they replace. When a listed type
    # is one being removed, replacing with it again only churns (deleting the others saves as much):
    # Karpenter then keeps only types cheaper than that node.
    cheapest = _cheapest(snapshot.offerings, launch)
    limit = before
    same = [prices[n.name] for n in nodes if n.labels.get(INSTANCE_TYPE_LABEL) in launch.instance_types]
    if len(nodes) > 1 and same:
        limit = min(limit, max(same))
    cheaper = tuple(t for t in launch.instance_types if cheapest.get(t, math.inf) < limit)
    if not cheaper:
        return None
    if all_spot and launch.capacity_type == "spot" and len(nodes) == 1:
        # Karpenter's spot-to-spot rule: EC2 picks a spot type by availability as well as price, so a
        # replacement offered every cheaper type could land on one that is itself consolidated again.
        # Replace one spot node only when at least 15 cheaper types remain, and offer only the 15
        # cheapest: whatever EC2 picks is then never worth replacing at once.
        if len(cheaper) < MIN_SPOT_TO_SPOT_TYPES:
            return None
        cheaper = cheaper[:MIN_SPOT_TO_SPOT_TYPES]
    launch = replace(launch, instance_types=cheaper, hourly_price=cheapest[cheaper[0]])
    return Candidate("Underutilized", "replace", names, sim.pods, before, launch.hourly_price, (launch,))


# --- the decision ----------------------------------------------------------------------------------

def _reason(node: Node, pods: list[Pod], pool: NodePool, *, now: float,
            empty_since: Mapping[str, float]) -> Reason | None:
    d = pool.disruption
    moving = [p for p in pods if moves(p)]
    if not moving and d.consolidate_after is not None:
        since = empty_since.get(node.name)
        if since is not None and now - since >= d.consolidate_after:
            return "Empty"
    if d.expire_after is not None and node.created_at and now - node.created_at >= d.expire_after:
        return "Expired"
    if moving and d.consolidation_policy == "WhenEmptyOrUnderutilized" and d.consolidate_after is not None:
        # Karpenter measures consolidateAfter from the last pod scheduling event on the node; the
        # newest pod's creation (or the node's) is what the cluster state tells us.
        last_change = max([node.created_at, *(p.created_at for p in pods)])
        if now - last_change >= d.consolidate_after:
            return "Underutilized"
    return None


def decide(inp: DisruptionInput) -> Decision:
    """Candidates to act on this pass (within budgets) and the nodes guards kept."""
    snap, now, settings = inp.snapshot, inp.now, inp.settings
    pools = {p.name: p for p in snap.node_pools}
    out = Decision()
    on_node = pods_by_node(snap.pods)
    # Nodes the planner would give pending pods to are about to be used: leave them alone.
    receiving: set[str] = set()
    if any(p.is_pending for p in snap.pods):
        receiving = set(plan(replace(snap, in_flight=[])).existing.values())
    budgets = _Budgets(pools, snap.nodes, now)
    busy = any(in_progress(n) for n in snap.nodes if is_ours(n, pools) and n.name not in inp.exclude)
    owned = set(inp.owned_instances)

    by_reason: dict[Reason, list[Node]] = {"Empty": [], "Expired": [], "Underutilized": []}
    for node in sorted(snap.nodes, key=lambda n: n.name):
        if not is_ours(node, pools) or in_progress(node) or node.name in inp.exclude:
            continue
        pool = pools[node.node_pool]
        pods = on_node.get(node.name, [])
        reason = _reason(node, pods, pool, now=now, empty_since=inp.empty_since)
        if reason is None or (reason != "Expired" and node.name in receiving):
            continue
        if node.instance_id not in owned:
            out.blocked.append(Blocked(node.name, reason, "NotOurs",
                                       f"instance {node.instance_id or '(no providerID)'} of node {node.name} does "
                                       f"not carry this cluster's ownership tags"))
            continue
        guard = guard_for(node, pods, pdbs=inp.pdbs, all_pods=snap.pods, settings=settings)
        if guard is not None:
            out.blocked.append(Blocked(node.name, reason, guard[0], guard[1]))
            continue
        by_reason[reason].append(node)

    prices = {n.name: node_price(n, snap.offerings) for n in snap.nodes}
    pool_of = {n.name: n.node_pool for n in snap.nodes}

    def admit(nodes: Iterable[str], reason: Reason) -> bool:
        names = list(nodes)
        if budgets.fits((pool_of[n] for n in names), reason):
            budgets.take(pool_of[n] for n in names)
            return True
        for n in names:
            out.blocked.append(Blocked(n, reason, "Budget", f"NodePool {pool_of[n]}'s disruption budget for "
                                                            f"{reason} allows no more nodes now"))
        return False

    for node in sorted(by_reason["Empty"], key=lambda n: -(prices[n.name] or 0.0)):
        if admit([node.name], "Empty"):
            out.candidates.append(Candidate("Empty", "delete", (node.name,), (), prices[node.name] or 0.0))

    leaving: list[str] = []
    for node in sorted(by_reason["Expired"], key=lambda n: (n.created_at, n.name)):
        if not admit([node.name], "Expired"):
            continue
        sim = simulate(snap, [*leaving, node.name])
        leaving.append(node.name)
        # Earlier expired nodes' pods are in this simulation too; their launches were already planned.
        taken = {k for c in out.candidates for k in c.pods}
        launches = tuple(ln for ln in sim.launches if not set(ln.pods) <= taken)
        note = (f"{len(sim.unschedulable)} pod(s) fit nowhere and will stay pending" if sim.unschedulable else "")
        mine = tuple(k for k in sim.pods if k not in taken)
        out.candidates.append(Candidate(
            "Expired", "replace" if launches else "delete", (node.name,), mine, prices[node.name] or 0.0,
            sum(ln.hourly_price for ln in launches), launches, note))

    if by_reason["Underutilized"]:
        if busy or out.candidates:
            out.notes.append("consolidation waits: other nodes are being disrupted")
        else:
            best = _consolidate(snap, by_reason["Underutilized"], prices=prices, settings=settings,
                                budgets=budgets, pool_of=pool_of)
            if best is not None and admit(best.nodes, "Underutilized"):
                out.candidates.append(best)
            elif best is None:
                out.notes.append(f"consolidation: no cheaper arrangement for {len(by_reason['Underutilized'])} "
                                 f"underutilized node(s)")
    return out


def _consolidate(snap: PlanInput, nodes: list[Node], *, prices: Mapping[str, float | None], settings: Settings,
                 budgets: _Budgets, pool_of: Mapping[str, str]) -> Candidate | None:
    """Karpenter's order: multi-node consolidation (the longest prefix of the candidates, ordered by
    saving per disrupted pod, that can be deleted or replaced by one cheaper node), else the single
    node with the most saving per disrupted pod."""
    priced = {n.name: p for n in nodes if (p := prices[n.name]) is not None}
    moving = pods_by_node(p for p in snap.pods if moves(p))
    ordered = sorted((n for n in nodes if n.name in priced),
                     key=lambda n: (-priced[n.name] / max(1, len(moving.get(n.name, []))), n.name))
    prefix: list[Node] = []
    for n in ordered:
        if len(prefix) >= settings.max_multi_node_candidates:
            break
        if budgets.fits([pool_of[m.name] for m in (*prefix, n)], "Underutilized"):
            prefix.append(n)
    for size in range(len(prefix), 1, -1):
        found = consolidation(snap, prefix[:size], prices=priced, settings=settings)
        if found is not None:
            return found
    singles = [c for n in ordered if budgets.fits([pool_of[n.name]], "Underutilized")
               if (c := consolidation(snap, [n], prices=priced, settings=settings)) is not None]
    return max(singles, key=lambda c: (c.saving_per_pod, c.saving), default=None)
