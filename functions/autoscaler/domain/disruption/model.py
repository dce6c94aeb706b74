"""The disruption vocabulary: reasons, candidates, blocked nodes, the decision's input, and small facts
about nodes and pods every method reads."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from autoscaler.domain.fleet import CloudInstance, ResolvedNodeClass
from autoscaler.domain.keys import CAPACITY_TYPE_LABEL, INSTANCE_TYPE_LABEL
from autoscaler.domain.models import DISRUPTED_TAINT, Node, Offering, Pod, PodDisruptionBudget
from autoscaler.domain.node_state import read_state
from autoscaler.domain.nodepool import NodePool
from autoscaler.domain.plan import Launch, PlanInput

Reason = Literal["Empty", "Expired", "Underutilized", "Drifted", "Unhealthy", "Overprovisioned",
                 "CapacityBlockExpiring", "NodePoolRemoved"]
CandidateAction = Literal["delete", "replace"]  # what happens to the nodes of a Candidate
# Karpenter's MinInstanceTypesForSpotToSpotConsolidation: cheaper spot types a single-node spot-to-spot
# replacement needs, and the number it is launched with.
MIN_SPOT_TO_SPOT_TYPES = 15
Guard = Literal["Budget", "DoNotDisrupt", "PDB", "BarePod", "NotOurs", "UnhealthyNodePool", "NodeLimit"]

DRAIN_REASONS: dict[Reason, str] = {"Empty": "empty", "Expired": "expired", "Underutilized": "underutilized",
                                    "Drifted": "drifted", "Unhealthy": "unhealthy",
                                    "Overprovisioned": "overprovisioned",
                                    "CapacityBlockExpiring": "capacityBlockExpiring",
                                    "NodePoolRemoved": "nodePoolRemoved"}
REASON_OF_DRAIN = {v: k for k, v in DRAIN_REASONS.items()}


@dataclass(frozen=True, slots=True)
class Settings:
    allow_bare_pods: bool = False
    spot_to_spot_consolidation: bool = False
    max_multi_node_candidates: int = 10  # nodes tried together in multi-node consolidation
    node_repair: bool = True
    drift: bool = True
    # Karpenter v1's expiry: outside budgets and do-not-disrupt; PDBs hold it only until the NodePool's
    # terminationGracePeriod. False: expiry waits for every guard like the other reasons (opt-in).
    forceful_expiry: bool = True


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
    # Drift: our instances by id (tags carry the launch hashes; raw has ImageId, SubnetId, SecurityGroups)
    # and what each EC2NodeClass resolves to now (absent: not resolved this pass, no AMI/network drift).
    instances: Mapping[str, CloudInstance] = field(default_factory=dict)
    resolved: Mapping[str, ResolvedNodeClass] = field(default_factory=dict)
    # Capacity Blocks within 40 minutes of their end: reservation id -> why (their nodes must go).
    expiring_reservations: Mapping[str, str] = field(default_factory=dict)


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


def node_prices(nodes: Iterable[Node], offerings: Iterable[Offering]) -> dict[str, float | None]:
    """``node_price`` of every node, by name, from one pass over the offerings (a 500-node pass against
    thousands of offerings scanned them once per node)."""
    nodes = list(nodes)
    # Only the types the nodes run: the catalog's other offerings (most of them) cannot price a node.
    wanted = {node.labels.get(INSTANCE_TYPE_LABEL) for node in nodes}
    cheapest: dict[tuple[str, str, str | None], float] = {}
    for o in offerings:
        if o.instance_type not in wanted:
            continue
        for key in ((o.instance_type, o.capacity_type, o.zone), (o.instance_type, o.capacity_type, None)):
            if key not in cheapest or o.price < cheapest[key]:
                cheapest[key] = o.price
    out: dict[str, float | None] = {}
    for node in nodes:
        it = node.labels.get(INSTANCE_TYPE_LABEL)
        out[node.name] = None if it is None else cheapest.get(
            (it, node.labels.get(CAPACITY_TYPE_LABEL, "on-demand"), node.zone))
    return out


def pods_by_node(pods: Iterable[Pod]) -> dict[str, list[Pod]]:
    out: dict[str, list[Pod]] = defaultdict(list)
    for p in pods:
        if p.node_name:
            out[p.node_name].append(p)
    return out


