"""What a launch asks of the cloud and what came back, independent of EC2's wire shapes.

``FleetRequest`` is the adapter-facing request (the planner's ``Launch`` is converted into it by the
glue code); ``FleetResult`` reports precisely what launched and what did not. The resource tags
written on everything launched, and the ownership rule built on them, live here because they are
the product's only state: an instance without them is never touched.
"""

from __future__ import annotations

import secrets
import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from autoscaler.domain.models import CapacityType, InstanceType, Taint
from autoscaler.domain.nodeclass import KubeletConfiguration, NodeClass
from autoscaler.ports import Clock

# Resource tags (DESIGN.md "Resource tags on everything launched").
CLUSTER_TAG_PREFIX = "kubernetes.io/cluster/"
EKS_CLUSTER_TAG = "eks:eks-cluster-name"
NODEPOOL_TAG = "karpenter.sh/nodepool"
NODECLASS_TAG = "karpenter.k8s.aws/ec2nodeclass"
NODECLAIM_TAG = "karpenter.sh/nodeclaim"
NAME_TAG = "Name"
MANAGED_BY_TAG = "eks-serverless-autoscaler/managed-by"
# The pods a launch was made for, so a later pass counts the in-flight instance as their capacity
# (``InFlightNode.pod_keys``) until it registers. Spread over numbered tags: a value holds 256 chars.
PODS_TAG_PREFIX = "eks-serverless-autoscaler/pods-"
MAX_POD_TAGS = 20

# Every launched node starts with this taint; it is removed once the node registers (Karpenter's rule).
UNREGISTERED_TAINT = Taint(key="karpenter.sh/unregistered", effect="NoExecute")

# EC2 error codes that mean "this offering cannot be had right now": mark and try the others.
CAPACITY_ERROR_CODES = frozenset({
    "InsufficientInstanceCapacity",
    "InsufficientCapacity",
    "InsufficientHostCapacity",
    "InsufficientReservedInstanceCapacity",
    "MaxSpotInstanceCountExceeded",
    "MaxSpotFleetRequestCountExceeded",
    "UnfulfillableCapacity",
    "Unsupported",
    "InsufficientFreeAddressesInSubnet",
    "VcpuLimitExceeded",
    "SpotMaxPriceTooLow",
})

OfferingKey = tuple[str, str, str]  # (instance type, zone, capacity type)

_CLAIM_ALPHABET = string.ascii_lowercase + string.digits


def new_claim_id(node_pool: str = "") -> str:
    """A fresh node-claim id, ``<nodepool>-<8 random chars>`` like Karpenter's NodeClaim names."""
    suffix = "".join(secrets.choice(_CLAIM_ALPHABET) for _ in range(8))
    return f"{node_pool}-{suffix}" if node_pool else f"nodeclaim-{suffix}"


def pod_tags(pod_keys: list[str] | tuple[str, ...]) -> dict[str, str]:
    """``ns/name`` keys packed space-separated into at most ``MAX_POD_TAGS`` tags of <= 256 chars.
    Keys that do not fit are left out: those pods are then placed afresh by the next pass, which still
    fills in-flight capacity before opening new nodes."""
    tags: dict[str, str] = {}
    current = ""
    for key in pod_keys:
        if len(key) > 256:
            continue
        candidate = f"{current} {key}" if current else key
        if len(candidate) <= 256:
            current = candidate
            continue
        tags[f"{PODS_TAG_PREFIX}{len(tags)}"] = current
        current = key
        if len(tags) >= MAX_POD_TAGS:
            return tags
    if current and len(tags) < MAX_POD_TAGS:
        tags[f"{PODS_TAG_PREFIX}{len(tags)}"] = current
    return tags


def pods_from_tags(tags: Mapping[str, str]) -> tuple[str, ...]:
    """The pod keys :func:`pod_tags` wrote, in order."""
    numbered = sorted((int(k[len(PODS_TAG_PREFIX):]), v) for k, v in tags.items()
                      if k.startswith(PODS_TAG_PREFIX) and k[len(PODS_TAG_PREFIX):].isdigit())
    return tuple(key for _, value in numbered for key in value.split())


def cluster_tag(cluster_name: str) -> str:
    return f"{CLUSTER_TAG_PREFIX}{cluster_name}"


def ownership_tags(cluster_name: str) -> dict[str, str]:
    """The tags that make a resource this cluster's autoscaler's (checked before any termination)."""
    return {
        cluster_tag(cluster_name): "owned",
        EKS_CLUSTER_TAG: cluster_name,
        MANAGED_BY_TAG: cluster_name,
    }


def launch_tags(
    *, cluster_name: str, node_pool: str, node_class: str, claim_id: str, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """All tags for a launched instance, its volumes and its fleet. ``extra`` (the EC2NodeClass's own
    tags) cannot override the autoscaler's keys: ownership must stay trustworthy."""
    tags = dict(extra or {})
    tags.setdefault(NAME_TAG, f"{cluster_name}/{claim_id}")
    tags.update(ownership_tags(cluster_name))
    tags.update({NODEPOOL_TAG: node_pool, NODECLASS_TAG: node_class, NODECLAIM_TAG: claim_id})
    return tags


def ownership_problem(tags: Mapping[str, str], cluster_name: str) -> str | None:
    """Why a resource with these tags is NOT this cluster's autoscaler's, or None when it is."""
    for key, want in ownership_tags(cluster_name).items():
        got = tags.get(key)
        if got != want:
            return f"tag {key!r} is {got!r}, expected {want!r}"
    return None


def is_owned(tags: Mapping[str, str], cluster_name: str) -> bool:
    return ownership_problem(tags, cluster_name) is None


class OwnershipError(RuntimeError):
    """Refused to act on a resource that does not carry this cluster's ownership tags."""

    def __init__(self, instance_id: str, reason: str) -> None:
        super().__init__(f"instance {instance_id} is not owned by this autoscaler ({reason}); refusing to touch it")
        self.instance_id = instance_id
        self.reason = reason


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

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError(f"FleetRequest {self.claim_id}: count must be >= 1, got {self.count}")
        if not self.capacity_types:
            raise ValueError(f"FleetRequest {self.claim_id}: capacity_types is empty")
        if not self.instance_types:
            raise ValueError(f"FleetRequest {self.claim_id}: instance_types is empty")


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


class UnavailableOfferings:
    """Offerings that recently failed for lack of capacity, each forgotten after ``ttl`` seconds
    (Karpenter's 3-minute ICE cache). Lives in the warm container; the planner reads ``snapshot()``."""

    def __init__(self, clock: Clock, *, ttl: float = 180.0) -> None:
        self._clock = clock
        self._ttl = ttl
        self._until: dict[OfferingKey, float] = {}

    def mark(self, instance_type: str, zone: str, capacity_type: str, *, ttl: float | None = None) -> None:
        self._until[(instance_type, zone, capacity_type)] = self._clock.monotonic() + (
            self._ttl if ttl is None else ttl
        )

    def is_unavailable(self, instance_type: str, zone: str, capacity_type: str) -> bool:
        until = self._until.get((instance_type, zone, capacity_type))
        if until is None:
            return False
        if self._clock.monotonic() >= until:
            del self._until[(instance_type, zone, capacity_type)]
            return False
        return True

    def snapshot(self) -> frozenset[OfferingKey]:
        now = self._clock.monotonic()
        for key in [k for k, until in self._until.items() if now >= until]:
            del self._until[key]
        return frozenset(self._until)

    def __len__(self) -> int:
        return len(self.snapshot())


def supports(instance_type: InstanceType, capacity_type: str) -> bool:
    return instance_type.supports_spot if capacity_type == "spot" else instance_type.supports_on_demand
