"""Lean, immutable models of the Kubernetes and EC2 objects the autoscaler reasons about.

These are deliberately smaller than the API objects: only what scheduling, disruption and
interruption handling read. ``autoscaler.domain.objects`` builds them from raw API JSON (the same
shapes ``kubectl get -o json`` and ``aws ec2 describe-*`` print), for the CLI snapshot and for the
Kubernetes and AWS adapters alike.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from autoscaler.domain.keys import (
    DISRUPTED_TAINT_KEY,
    MIRROR_POD_ANNOTATION,
    NODEPOOL_LABEL,
    PROVISIONER_NAME_LABEL,
    UNREGISTERED_TAINT_KEY,
)
from autoscaler.domain.resources import Resources

Operator = Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]
CapacityType = Literal["spot", "on-demand", "reserved"]  # reserved: docs/configuration.md



@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    effect: TaintEffect
    value: str = ""


# The taints the product itself puts on nodes (their keys: ``domain/keys.py``).
UNREGISTERED_TAINT = Taint(key=UNREGISTERED_TAINT_KEY, effect="NoExecute")
DISRUPTED_TAINT = Taint(key=DISRUPTED_TAINT_KEY, effect="NoSchedule")
# A rebalance recommendation with the ``taint`` action: new pods prefer other nodes; nothing is evicted.
REBALANCE_TAINT = Taint(key=DISRUPTED_TAINT_KEY, effect="PreferNoSchedule")
# A deleting pod this long past its deletion time is stuck (its kubelet is gone): drains stop waiting for it.
STUCK_TERMINATING_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str = ""
    effect: str = ""  # empty matches every effect
    toleration_seconds: int | None = None

    def tolerates(self, taint: Taint) -> bool:
        """Kubernetes' rule: empty key with Exists tolerates everything; effects must match if set."""
        if self.effect and self.effect != taint.effect:
            return False
        if not self.key:
            return self.operator == "Exists"
        if self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value


def untolerated_taints(tolerations: tuple[Toleration, ...], taints: tuple[Taint, ...]) -> list[Taint]:
    """The taints (NoSchedule / NoExecute) that no toleration covers; empty means schedulable."""
    return [
        t for t in taints
        if t.effect != "PreferNoSchedule" and not any(tol.tolerates(t) for tol in tolerations)
    ]


@dataclass(frozen=True, slots=True)
class Requirement:
    """One node-selector requirement (``key operator values``) as in node affinity and NodePools."""

    key: str
    operator: Operator
    values: tuple[str, ...] = ()
    min_values: int | None = None  # NodePool requirements only (Karpenter's minValues)


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    """Requirements that must all hold (a term); a node affinity is satisfied by any one term."""

    requirements: tuple[Requirement, ...]


@dataclass(frozen=True, slots=True)
class LabelSelector:
    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[Requirement, ...] = ()  # In, NotIn, Exists, DoesNotExist

    def matches(self, labels: Mapping[str, str]) -> bool:
        for k, v in self.match_labels:
            if labels.get(k) != v:
                return False
        for req in self.match_expressions:
            present = req.key in labels
            if req.operator == "In" and (not present or labels[req.key] not in req.values):
                return False
            if req.operator == "NotIn" and present and labels[req.key] in req.values:
                return False
            if req.operator == "Exists" and not present:
                return False
            if req.operator == "DoesNotExist" and present:
                return False
        return True


@dataclass(frozen=True, slots=True)
class TopologySpreadConstraint:
    max_skew: int
    topology_key: str
    when_unsatisfiable: Literal["DoNotSchedule", "ScheduleAnyway"]
    label_selector: LabelSelector | None
    min_domains: int | None = None
    # Which nodes count as domains (and whose pods count): kube-scheduler's defaults.
    node_affinity_policy: Literal["Honor", "Ignore"] = "Honor"
    node_taints_policy: Literal["Honor", "Ignore"] = "Ignore"


# ``PodAffinityTerm.namespaces`` entry meaning every namespace (an empty ``namespaceSelector``).
ALL_NAMESPACES = "*"
# ``PodAffinityTerm.namespaces`` entry no namespace has (a namespaceSelector that selects none).
NO_NAMESPACE = ""


@dataclass(frozen=True, slots=True)
class PodAffinityTerm:
    label_selector: LabelSelector | None
    topology_key: str
    namespaces: tuple[str, ...] = ()  # empty (and no selector) = the pod's own namespace
    # A non-empty namespaceSelector: the namespaces whose labels it matches are added to ``namespaces``
    # (scheduling/namespace_selector.py resolves it against the cluster's namespaces).
    namespace_selector: LabelSelector | None = None


# The unspecified address: a host port bound on it (or with no hostIP) takes that port on every address.
_ANY_HOST_IP = ("", "0.0.0.0")


@dataclass(frozen=True, slots=True)
class HostPort:
    port: int
    protocol: str = "TCP"
    host_ip: str = ""  # "" = unset, which kube-scheduler reads as 0.0.0.0

    def overlaps(self, other: HostPort) -> bool:
        """Whether the two cannot both be bound on one node, as kube-scheduler's NodePorts filter decides:
        the same port and protocol on the same address, or either on the unspecified one (0.0.0.0)."""
        return (self.port == other.port and self.protocol == other.protocol
                and (self.host_ip == other.host_ip or self.host_ip in _ANY_HOST_IP
                     or other.host_ip in _ANY_HOST_IP))


def host_ports_overlap(wanted: Iterable[HostPort], held: Iterable[HostPort]) -> bool:
    """Whether any of ``wanted`` overlaps any of ``held`` (``HostPort.overlaps``)."""
    held = tuple(held)
    return any(want.overlaps(have) for want in wanted for have in held)


@dataclass(frozen=True, slots=True)
class OwnerRef:
    kind: str
    name: str
    uid: str = ""
    controller: bool = False
    api_version: str = ""


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """A namespaced object an Event can be about other than a pod or node (a pod's controller)."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str = ""


@dataclass(frozen=True, slots=True)
class Pod:
    """A pod as the scheduler and drain see it. ``requests`` is the effective request:
    max(largest init container, sum of app containers) + pod overhead."""

    namespace: str
    name: str
    uid: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    node_name: str | None = None
    phase: str = "Pending"
    requests: Resources = field(default_factory=dict)
    node_selector: Mapping[str, str] = field(default_factory=dict)
    required_node_affinity: tuple[NodeSelectorTerm, ...] = ()  # OR of terms; empty = none
    preferred_node_affinity: tuple[tuple[int, NodeSelectorTerm], ...] = ()  # (weight, term)
    tolerations: tuple[Toleration, ...] = ()
    topology_spread: tuple[TopologySpreadConstraint, ...] = ()
    pod_affinity: tuple[PodAffinityTerm, ...] = ()  # required terms
    pod_anti_affinity: tuple[PodAffinityTerm, ...] = ()  # required terms
    preferred_pod_affinity: tuple[tuple[int, PodAffinityTerm], ...] = ()  # (weight, term)
    preferred_pod_anti_affinity: tuple[tuple[int, PodAffinityTerm], ...] = ()  # (weight, term)
    host_ports: tuple[HostPort, ...] = ()
    volume_claims: tuple[str, ...] = ()  # PVC names in the pod's namespace
    # generic ephemeral volumes: claim name -> its template's StorageClass ("" = none named)
    ephemeral_claims: Mapping[str, str] = field(default_factory=dict)
    empty_dir: bool = False  # mounts an emptyDir volume: its data dies with the pod (kubectl drain's local data)
    owner: OwnerRef | None = None  # the controller owner reference, if any
    priority: int = 0
    priority_class_name: str = ""
    created_at: float = 0.0  # epoch seconds
    deleting: bool = False  # metadata.deletionTimestamp is set
    # metadata.deletionTimestamp in epoch seconds (the delete's time plus its grace period; 0 when unset)
    deletion_at: float = 0.0
    termination_grace_seconds: int = 30
    ready: bool = False
    unschedulable: bool = False  # PodScheduled=False with reason Unschedulable
    scheduling_gated: bool = False  # spec.schedulingGates non-empty

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def is_mirror(self) -> bool:
        return MIRROR_POD_ANNOTATION in self.annotations

    @property
    def is_daemonset_pod(self) -> bool:
        return self.owner is not None and self.owner.kind == "DaemonSet"

    @property
    def is_finished(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    def stuck_terminating(self, now: float) -> bool:
        """Deleting and more than a minute past its deletion time: the kubelet that should confirm the
        deletion is gone (Karpenter's ``IsStuckTerminating``); a drain no longer waits for such a pod."""
        return self.deleting and self.deletion_at > 0 and now - self.deletion_at > STUCK_TERMINATING_SECONDS

    @property
    def is_pending(self) -> bool:
        """Waiting for a node: not bound, not finishing, not gated."""
        return (
            self.node_name is None and self.phase == "Pending"
            and not self.deleting and not self.scheduling_gated
        )


@dataclass(frozen=True, slots=True)
class NodeCondition:
    """One ``status.conditions`` entry: ``status`` is True, False or Unknown; ``since`` is its
    ``lastTransitionTime`` in epoch seconds (0 when absent)."""

    type: str
    status: str
    since: float = 0.0


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    allocatable: Resources = field(default_factory=dict)
    capacity: Resources = field(default_factory=dict)
    provider_id: str = ""  # aws:///us-east-1a/i-0123456789abcdef0
    ready: bool = False
    created_at: float = 0.0
    deleting: bool = False
    conditions: tuple[NodeCondition, ...] = ()
    # metadata.resourceVersion as read: a conditional write of the node-state record (optimistic
    # concurrency) is refused when the node changed since; "" when not read from an API server.
    resource_version: str = ""

    def condition(self, kind: str) -> NodeCondition | None:
        return next((c for c in self.conditions if c.type == kind), None)

    @property
    def instance_id(self) -> str | None:
        if self.provider_id.startswith("aws://"):
            tail = self.provider_id.rsplit("/", 1)[-1]
            return tail if tail.startswith("i-") else None
        return None

    @property
    def zone(self) -> str | None:
        return self.labels.get("topology.kubernetes.io/zone")

    @property
    def node_pool(self) -> str:
        """The NodePool the node belongs to: ``karpenter.sh/nodepool``, else the v1alpha5 Provisioner of
        ``karpenter.sh/provisioner-name`` (Karpenter v0.2x nodes), which converts to the NodePool of the
        same name; "" for neither."""
        return self.labels.get(NODEPOOL_LABEL) or self.labels.get(PROVISIONER_NAME_LABEL) or ""


@dataclass(frozen=True, slots=True)
class DaemonSet:
    namespace: str
    name: str
    template: Pod  # the pod template as a Pod (requests, selectors, affinity, tolerations)


@dataclass(frozen=True, slots=True)
class PodDisruptionBudget:
    namespace: str
    name: str
    selector: LabelSelector | None
    min_available: int | str | None = None  # int or "50%"
    max_unavailable: int | str | None = None


@dataclass(frozen=True, slots=True)
class PersistentVolumeClaim:
    namespace: str
    name: str
    storage_class: str | None = None
    volume_name: str | None = None


@dataclass(frozen=True, slots=True)
class PersistentVolume:
    name: str
    zones: tuple[str, ...] = ()  # from spec.nodeAffinity on topology zone keys; empty = any


@dataclass(frozen=True, slots=True)
class StorageClass:
    name: str
    volume_binding_mode: str = "Immediate"
    zones: tuple[str, ...] = ()  # allowedTopologies; empty = any


@dataclass(frozen=True, slots=True)
class InstanceType:
    """An EC2 instance type as DescribeInstanceTypes reports it, reduced to what placement needs."""

    name: str
    architecture: Literal["amd64", "arm64"]
    vcpus: int
    memory_mib: int
    max_enis: int
    ipv4_per_eni: int
    gpu_count: int = 0
    gpu_manufacturer: str = ""
    gpu_name: str = ""
    gpu_memory_mib: int = 0
    hypervisor: str = ""  # "nitro", "xen", "" for bare metal
    bare_metal: bool = False
    local_storage_gib: int = 0
    network_bandwidth: str = ""
    supports_spot: bool = True
    supports_on_demand: bool = True
    current_generation: bool = True

    @property
    def family(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def size(self) -> str:
        return self.name.split(".", 1)[1] if "." in self.name else ""

    @property
    def category(self) -> str:
        """Leading letters of the family: "m" for m5, "c" for c6gn, "inf" for inf2, "u-" types."""
        fam = self.family
        i = 0
        while i < len(fam) and fam[i].isalpha():
            i += 1
        return fam[:i]

    @property
    def generation(self) -> int:
        fam = self.family[len(self.category):]
        digits = ""
        for ch in fam:
            if not ch.isdigit():
                break
            digits += ch
        return int(digits) if digits else 0


@dataclass(frozen=True, slots=True)
class Offering:
    """Where and how an instance type can be bought, and at what hourly price (USD)."""

    instance_type: str
    zone: str
    capacity_type: CapacityType
    price: float
    available: bool = True


EvictionOutcome = Literal["evicted", "gone", "blocked", "throttled", "error"]


@dataclass(frozen=True, slots=True)
class EvictionResult:
    """What one eviction request came to: ``evicted`` (the API server accepted it), ``gone`` (the pod
    no longer exists), ``blocked`` (a PodDisruptionBudget allowed no disruption until the deadline),
    ``throttled`` (API throttling or server errors until the deadline), ``error`` (anything else, with
    the API server's message). ``throttled_attempts``: attempts refused by throttling (429 without a PDB
    cause) or a server error, counted apart from PDB refusals."""

    pod: str  # namespace/name
    outcome: EvictionOutcome
    message: str = ""
    attempts: int = 1
    throttled_attempts: int = 0

    @property
    def ok(self) -> bool:
        """True when the pod is on its way out or already gone."""
        return self.outcome in ("evicted", "gone")
