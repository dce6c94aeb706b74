"""What the scheduler decides: the input snapshot (``PlanInput``) and its answer (``Plan``).

A ``Launch`` is one new node: the launcher turns it into one CreateFleet request; EC2 may pick any of
its ``instance_types`` (each fits all of its pods plus daemon overhead) in any of its ``zones``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from autoscaler.domain.models import (
    DaemonSet,
    InstanceType,
    Node,
    Offering,
    PersistentVolume,
    PersistentVolumeClaim,
    Pod,
    StorageClass,
    Taint,
)
from autoscaler.domain.nodeclass import NodeClass
from autoscaler.domain.nodepool import NodePool
from autoscaler.domain.reservations import CapacityReservation


@dataclass(frozen=True, slots=True)
class InFlightNode:
    """An instance launched by the autoscaler that has not registered as a node yet."""

    instance_id: str
    node_pool: str
    instance_type: str
    zone: str
    capacity_type: str
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    launched_at: float = 0.0
    pod_keys: tuple[str, ...] = ()  # the pods it was launched for
    # A launch whose answer is not known yet: EC2 may have chosen any of these types. NodePool limits
    # count the largest of them, so an unknown answer can never push a pool past its limit.
    may_be: tuple[str, ...] = ()


@dataclass(slots=True)
class PlanInput:
    """Everything the scheduler reads, as domain objects. Pending pods are those with ``is_pending``."""

    node_pools: list[NodePool]
    node_classes: Mapping[str, NodeClass]
    pods: list[Pod]
    nodes: list[Node] = field(default_factory=list)
    daemonsets: list[DaemonSet] = field(default_factory=list)
    pvcs: list[PersistentVolumeClaim] = field(default_factory=list)
    pvs: list[PersistentVolume] = field(default_factory=list)
    storage_classes: list[StorageClass] = field(default_factory=list)
    instance_types: list[InstanceType] = field(default_factory=list)
    offerings: list[Offering] = field(default_factory=list)
    in_flight: list[InFlightNode] = field(default_factory=list)
    region: str = ""
    # Registered nodes not initialised yet, by instance id: the pods they were launched for (their node
    # claims). Those pods go there first, as on an in-flight instance, until kube-scheduler can bind them.
    launched_for: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # EC2NodeClass name -> the zones its subnets cover (absent: not known, every offering's zone counts).
    node_class_zones: Mapping[str, frozenset[str]] = field(default_factory=dict)
    # EC2NodeClass name -> its usable capacity reservations, ``available`` being what each still takes
    # (only for node classes of NodePools allowing ``reserved``; scheduling/reserved.py).
    reservations: Mapping[str, tuple[CapacityReservation, ...]] = field(default_factory=dict)
    # When the cluster was read (epoch seconds; 0: not known): a snapshot's ``takenAt``, the time
    # ``autoscaler plan`` judges registration time-outs at.
    taken_at: float = 0.0
    # Namespace name -> its labels: what a non-empty namespaceSelector of pod (anti-)affinity matches
    # (read only when a pod has one).
    namespaces: Mapping[str, Mapping[str, str]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Launch:
    node_pool: str
    node_class: str
    capacity_type: str  # "spot" | "on-demand" | "reserved"
    zones: tuple[str, ...]
    instance_types: tuple[str, ...]  # cheapest first, at most 60, each fits all pods + daemon overhead
    pods: tuple[str, ...]
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    startup_taints: tuple[Taint, ...]
    hourly_price: float
    capacity_types: tuple[str, ...] = ()  # what the NodePool allows, so the launcher can fall back
    # Per other capacity type the pool allows: the types to fall back to, cheapest at that capacity type
    # first. A spot launch's list is ordered by spot price and may lack a type offered only on-demand.
    fallback_instance_types: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Unschedulable:
    pod: str
    reason: str


@dataclass(slots=True)
class Plan:
    launches: list[Launch] = field(default_factory=list)
    existing: dict[str, str] = field(default_factory=dict)  # pod key -> node name or instance id
    unschedulable: list[Unschedulable] = field(default_factory=list)
    solve_seconds: float = 0.0
    pending_pods: int = 0

    @property
    def hourly_price(self) -> float:
        return sum(launch.hourly_price for launch in self.launches)

    def to_json(self) -> dict[str, Any]:
        """The ``autoscaler plan`` output contract of DESIGN.md."""
        return {
            "launches": [
                {"nodePool": ln.node_pool, "nodeClass": ln.node_class, "capacityType": ln.capacity_type,
                 "zones": list(ln.zones), "instanceTypes": list(ln.instance_types), "pods": list(ln.pods),
                 "labels": dict(ln.labels),
                 "taints": [{"key": t.key, "value": t.value, "effect": t.effect} if t.value
                            else {"key": t.key, "effect": t.effect} for t in ln.taints],
                 "hourlyPrice": round(ln.hourly_price, 6)}
                for ln in self.launches
            ],
            "existing": dict(self.existing),
            "unschedulable": [{"pod": u.pod, "reason": u.reason} for u in self.unschedulable],
            "summary": {"pendingPods": self.pending_pods, "launches": len(self.launches),
                        "hourlyPrice": round(self.hourly_price, 6), "solveSeconds": round(self.solve_seconds, 4)},
        }
