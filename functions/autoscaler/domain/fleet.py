"""What a launch asks of the cloud and what came back, independent of EC2's wire shapes.

``FleetRequest`` is the adapter-facing request (the planner's ``Launch`` is converted into it by the
launcher); ``FleetResult`` reports precisely what launched and what did not; ``CloudInstance`` is an
instance as the services see it (``instance_from_ec2`` builds it from a DescribeInstances ``Instance``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from autoscaler.domain.keys import (
    CAPACITY_RESERVATION_ID_LABEL,
    CAPACITY_TYPE_LABEL,
    NODECLAIM_TAG,
    NODEPOOL_LABEL,
    NODEPOOL_TAG,
)
from autoscaler.domain.models import CapacityType, InstanceType, Taint
from autoscaler.domain.nodeclass import KubeletConfiguration, NodeClass
from autoscaler.domain.objects import ec2_timestamp
from autoscaler.domain.ownership import pods_from_tags
from autoscaler.domain.plan import InFlightNode

# EC2 error codes that mean "this offering cannot be had right now": mark and try the others.
CAPACITY_ERROR_CODES = frozenset({
    "InsufficientInstanceCapacity",
    "InsufficientCapacity",
    "InsufficientHostCapacity",
    "InsufficientReservedInstanceCapacity",
    "ReservationCapacityExceeded",
    "MaxSpotInstanceCountExceeded",
    "MaxSpotFleetRequestCountExceeded",
    "UnfulfillableCapacity",
    "Unsupported",
    "InsufficientFreeAddressesInSubnet",
    "VcpuLimitExceeded",
    "SpotMaxPriceTooLow",
})

# Instance states in which an instance is going away: it is no capacity any more.
GOING_AWAY_STATES = frozenset({"shutting-down", "terminated", "stopping", "stopped"})

OfferingKey = tuple[str, str, str]  # (instance type, zone, capacity type)


@dataclass(frozen=True, slots=True)
class FleetRequest:
    """Launch ``count`` identical nodes for one NodePool with one EC2NodeClass.

    ``capacity_types`` is the order of preference (the first that yields capacity wins);
    ``instance_types`` is ordered cheapest first; empty ``zones`` means every zone the node class's
    subnets cover. ``labels``/``taints`` go into the node's kubelet registration; the
    ``karpenter.sh/unregistered`` taint is always added. With ``count > 1`` all nodes share the claim id.
    ``tags`` are extra resource tags (e.g. :func:`pod_tags`); they never override the autoscaler's own.
    """

    claim_id: str
    cluster_name: str
    node_pool: str
    node_class: NodeClass
    capacity_types: tuple[CapacityType, ...]
    instance_types: tuple[str, ...]
    zones: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    startup_taints: tuple[Taint, ...] = ()
    kubelet: KubeletConfiguration | None = None
    count: int = 1
    tags: Mapping[str, str] = field(default_factory=dict)
    node_pool_hash: str = ""  # written as the karpenter.sh/nodepool-hash tag (drift)
    # A capacity type's own instance types (cheapest at it first) when they differ from ``instance_types``:
    # the on-demand fallback of a spot launch chooses from everything the NodePool allows on-demand.
    fallback_instance_types: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError(f"FleetRequest {self.claim_id}: count must be >= 1, got {self.count}")
        if not self.capacity_types:
            raise ValueError(f"FleetRequest {self.claim_id}: capacity_types is empty")
        if not self.instance_types:
            raise ValueError(f"FleetRequest {self.claim_id}: instance_types is empty")

    def instance_types_for(self, capacity_type: str) -> tuple[str, ...]:
        """The instance types to try at ``capacity_type``, cheapest at it first."""
        return self.fallback_instance_types.get(capacity_type) or self.instance_types


@dataclass(frozen=True, slots=True)
class LaunchedInstance:
    instance_id: str
    instance_type: str
    zone: str
    capacity_type: CapacityType
    claim_id: str


@dataclass(frozen=True, slots=True)
class FleetError:
    """One thing that did not launch and why. Offering fields are empty when EC2 did not say."""

    code: str
    message: str
    instance_type: str = ""
    zone: str = ""
    capacity_type: str = ""
    # EC2 may have acted although no instance was reported: no answer, a server error, or a client
    # token it already took with other parameters. Nothing else is tried after such an error.
    uncertain: bool = False

    @property
    def is_capacity_error(self) -> bool:
        return self.code in CAPACITY_ERROR_CODES


@dataclass(slots=True)
class FleetResult:
    requested: int = 0
    launched: list[LaunchedInstance] = field(default_factory=list)
    errors: list[FleetError] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return len(self.launched) >= self.requested

    @property
    def missing(self) -> int:
        return max(0, self.requested - len(self.launched))

    @property
    def uncertain(self) -> bool:
        """Whether EC2 may have launched instances this result does not list."""
        return any(e.uncertain for e in self.errors)


@dataclass(frozen=True, slots=True)
class ResolvedNodeClass:
    """What an EC2NodeClass's selector terms select now: every AMI (all architectures and variants),
    subnet and security group. A node whose instance is outside them has drifted."""

    amis: frozenset[str]
    subnets: frozenset[str]
    security_groups: frozenset[str]


@dataclass(frozen=True, slots=True)
class CloudInstance:
    """An EC2 instance this autoscaler launched, as the planner and disruption need it.
    ``raw`` is the DescribeInstances ``Instance`` object (the snapshot's ``inFlight`` shape)."""

    instance_id: str
    instance_type: str
    zone: str
    state: str
    capacity_type: CapacityType
    launch_time: float
    tags: Mapping[str, str]
    private_dns_name: str = ""
    raw: Mapping[str, Any] = field(default_factory=dict)

    @property
    def node_pool(self) -> str:
        return self.tags.get(NODEPOOL_TAG, "")

    @property
    def image_id(self) -> str:
        return str(self.raw.get("ImageId") or "")

    @property
    def subnet_id(self) -> str:
        return str(self.raw.get("SubnetId") or "")

    @property
    def security_groups(self) -> frozenset[str]:
        return frozenset(str(g.get("GroupId")) for g in self.raw.get("SecurityGroups") or () if g.get("GroupId"))

    @property
    def reservation_id(self) -> str:
        """The capacity reservation the instance runs in, or ""."""
        return str(self.raw.get("CapacityReservationId") or "")

    @property
    def claim_id(self) -> str:
        return self.tags.get(NODECLAIM_TAG, "")

    @property
    def provider_id(self) -> str:
        return f"aws:///{self.zone}/{self.instance_id}"


@dataclass(frozen=True, slots=True)
class LaunchTemplateInfo:
    """One launch template this autoscaler created (``created_at`` in epoch seconds)."""

    name: str
    template_id: str
    created_at: float


def supports(instance_type: InstanceType, capacity_type: str) -> bool:
    return instance_type.supports_spot if capacity_type == "spot" else instance_type.supports_on_demand


def instance_from_ec2(raw: Mapping[str, Any]) -> CloudInstance:
    """A DescribeInstances ``Instance`` (boto3's, with a datetime ``LaunchTime``, or the CLI's JSON, with
    an RFC 3339 string) as a CloudInstance, tags flattened to a dict. The one EC2-instance parser: the
    AWS adapter and ``autoscaler plan``'s ``inFlight`` snapshot key both use it. Raises ValueError
    naming the missing field."""
    for required in ("InstanceId", "InstanceType"):
        if not raw.get(required):
            raise ValueError(f"{required} is required")
    zone = (raw.get("Placement") or {}).get("AvailabilityZone")
    if not zone:
        raise ValueError("Placement.AvailabilityZone is required")
    launched = ec2_timestamp(raw.get("LaunchTime")) or 0.0
    return CloudInstance(
        instance_id=str(raw["InstanceId"]),
        instance_type=str(raw["InstanceType"]),
        zone=str(zone),
        state=str((raw.get("State") or {}).get("Name", "running")),
        capacity_type=_capacity_type(raw),
        launch_time=launched,
        tags={str(t["Key"]): str(t.get("Value", "")) for t in raw.get("Tags") or ()},
        private_dns_name=str(raw.get("PrivateDnsName", "")),
        raw=raw,
    )


def _capacity_type(raw: Mapping[str, Any]) -> CapacityType:
    if raw.get("InstanceLifecycle") == "spot":
        return "spot"
    # EC2 names the reservation an instance runs in; Karpenter calls that capacity type ``reserved``.
    return "reserved" if raw.get("CapacityReservationId") else "on-demand"


def in_flight_node(instance: CloudInstance) -> InFlightNode | None:
    """The planner's view of a launched instance that has not registered yet (None once it is going
    away): its NodePool, offering and the pods it was launched for."""
    if instance.state in GOING_AWAY_STATES:
        return None
    pool = instance.node_pool
    labels = {NODEPOOL_LABEL: pool, CAPACITY_TYPE_LABEL: instance.capacity_type} if pool else {}
    if pool and instance.reservation_id:
        labels[CAPACITY_RESERVATION_ID_LABEL] = instance.reservation_id
    return InFlightNode(
        instance_id=instance.instance_id, node_pool=pool, instance_type=instance.instance_type,
        zone=instance.zone, capacity_type=instance.capacity_type,
        labels=labels, launched_at=instance.launch_time, pod_keys=pods_from_tags(instance.tags),
    )
