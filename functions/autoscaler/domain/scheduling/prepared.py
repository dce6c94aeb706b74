"""What a plan derives from the cluster before placing anything: the bound pods of every node with their
summed requests (``BoundPods``) and each NodePool's instance types, offerings and allocatable less
DaemonSet overhead (``PoolTable``), the latter as an immutable value a warm caller may keep between passes.

A plan made with a kept ``PoolTable`` decides exactly what a plan made without it decides: the table is
used only when the inputs it was made from equal this plan's (compared by value); ``app/plan_prep.py``."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from autoscaler.domain import resources as res
from autoscaler.domain.allocatable import allocatable, capacity
from autoscaler.domain.keys import CAPACITY_TYPE_LABEL, NODEPOOL_LABEL, WELL_KNOWN_KEYS, ZONE_KEYS
from autoscaler.domain.labels import instance_type_labels
from autoscaler.domain.models import HostPort, Pod, Requirement, untolerated_taints
from autoscaler.domain.nodeclass import KubeletConfiguration, NodeClass
from autoscaler.domain.nodepool import NodePool, requirement_allows
from autoscaler.domain.plan import PlanInput
from autoscaler.domain.scheduling.pool_type import PoolType
from autoscaler.domain.scheduling.requirements import intersect, label_satisfies, required_variants
from autoscaler.domain.scheduling.vector import vector

# A node's bound, unfinished pods and the sum of their requests.
NodeLoad = tuple[tuple[Pod, ...], res.Resources]
_NO_LOAD: NodeLoad = ((), {})


@dataclass(frozen=True, slots=True)
class BoundPods:
    """The bound, unfinished pods of each node and their summed requests, by node name."""

    by_node: Mapping[str, NodeLoad]

    def load(self, node: str) -> NodeLoad:
        return self.by_node.get(node, _NO_LOAD)


def bound_pods(pods: Sequence[Pod]) -> BoundPods:
    """``BoundPods`` of ``pods``."""
    grouped: dict[str, list[Pod]] = defaultdict(list)
    for pod in pods:
        if pod.node_name and not pod.is_finished:
            grouped[pod.node_name].append(pod)
    return BoundPods({name: (tuple(here), res.total(pod.requests for pod in here)) for name, here in grouped.items()})


def plan_keys(pending: Sequence[Pod]) -> tuple[str, ...]:
    """The resource keys a plan's vectors have: cpu, memory, pods, then any other the pending pods request."""
    keys = [res.CPU, res.MEMORY, res.PODS]
    for pod in pending:
        for key, value in pod.requests.items():
            if value > 0 and key not in keys:
                keys.append(key)
    return tuple(keys)


def pending_pods(snap: PlanInput) -> list[Pod]:
    """The pods a plan places: pending, not DaemonSet pods."""
    # ``node_name is None`` first: a plain attribute that rules out the (many) bound pods before the property.
    return [pod for pod in snap.pods if pod.node_name is None and pod.is_pending and not pod.is_daemonset_pod]


def kubelet_of(pool: NodePool, node_classes: Mapping[str, NodeClass]) -> tuple[KubeletConfiguration | None,
                                                                                 int | None]:
    """The kubelet settings and root volume size (bytes) a NodePool's nodes get."""
    node_class: NodeClass | None = node_classes.get(pool.node_class_ref)
    kubelet = pool.kubelet or (node_class.kubelet if node_class else None)
    root = None
    if node_class is not None:
        for mapping in node_class.block_device_mappings:
            if ((mapping.root_volume or len(node_class.block_device_mappings) == 1) and mapping.ebs
                    and mapping.ebs.volume_size):
                root = res.parse_resource_list({"x": mapping.ebs.volume_size})["x"]
    return kubelet, root


def ami_family_of(pool: NodePool, node_classes: Mapping[str, NodeClass]) -> str | None:
    """The AMI family a NodePool's nodes boot (their kube-reserved memory depends on it: allocatable.py)."""
    node_class = node_classes.get(pool.node_class_ref)
    return node_class.ami_family if node_class is not None else None


@dataclass(frozen=True, slots=True)
class PoolPart:
    """One dynamic NodePool as every plan over the same inputs sees it (its usage is the plan's own)."""

    pool: NodePool
    types: tuple[PoolType, ...]
    zones: frozenset[str]
    capacity_types: frozenset[str]
    custom: Mapping[str, list[Requirement]]  # requirements on keys that are not well-known
    daemon_ports: Mapping[HostPort, str]  # host port -> the DaemonSet holding it


@dataclass(frozen=True, slots=True)
class PoolTable:
    """``PoolPart`` of every dynamic NodePool, by weight then name, and the inputs they were made from."""

    inputs: tuple[object, ...]
    parts: tuple[PoolPart, ...]


def _table_inputs(snap: PlanInput, unavailable: Collection[tuple[str, str, str]],
                  keys: tuple[str, ...]) -> tuple[object, ...]:
    # Everything ``_parts`` reads. Compared by value (equal lists of the same objects compare in
    # microseconds: list equality tries identity first).
    return (list(snap.node_pools), dict(snap.node_classes), list(snap.daemonsets), list(snap.instance_types),
            list(snap.offerings), dict(snap.node_class_zones), frozenset(unavailable), keys)


def pool_table(snap: PlanInput, unavailable: Collection[tuple[str, str, str]], keys: tuple[str, ...], *,
               previous: PoolTable | None = None) -> PoolTable:
    """The pool table of these inputs: ``previous`` when it was made from equal inputs, else built."""
    inputs = _table_inputs(snap, unavailable, keys)
    if previous is not None and previous.inputs == inputs:
        return previous
    return PoolTable(inputs, tuple(_parts(snap, frozenset(unavailable), keys)))


def _parts(snap: PlanInput, unavailable: frozenset[tuple[str, str, str]], keys: tuple[str, ...]) -> list[PoolPart]:
    by_type: dict[str, list[tuple[str, str, float]]] = defaultdict(list)
    for offering in snap.offerings:
        if offering.available and (offering.instance_type, offering.zone, offering.capacity_type) not in unavailable:
            by_type[offering.instance_type].append((offering.zone, offering.capacity_type, offering.price))
    out = []
    # A static NodePool keeps its own node count (domain/static_pools.py): never launched into for pods.
    dynamic = [pool for pool in snap.node_pools if not pool.is_static]
    for pool in sorted(dynamic, key=lambda pool: (-pool.weight, pool.name)):
        kubelet, root = kubelet_of(pool, snap.node_classes)
        family = ami_family_of(pool, snap.node_classes)
        # A template label on a well-known key (zone, capacity type, arch...) constrains like a requirement.
        requirements = [*pool.requirements, *(Requirement(key, "In", (value,)) for key, value in pool.labels.items()
                                              if key in WELL_KNOWN_KEYS and key != NODEPOOL_LABEL)]
        type_requirements = [requirement for requirement in requirements if requirement.key in WELL_KNOWN_KEYS
                             and requirement.key not in ZONE_KEYS
                             and requirement.key not in (CAPACITY_TYPE_LABEL, NODEPOOL_LABEL)]
        zone_requirements = [requirement for requirement in requirements if requirement.key in ZONE_KEYS]
        capacity_requirements = [requirement for requirement in requirements
                                 if requirement.key == CAPACITY_TYPE_LABEL]
        reserved = pool.allows_reserved
        pool_labels = {**pool.labels, NODEPOOL_LABEL: pool.name}
        landing = [daemonset for daemonset in snap.daemonsets
                   if not untolerated_taints(daemonset.template.tolerations, pool.taints)]
        daemons = [daemonset.template for daemonset in landing]
        types: list[PoolType] = []
        zones: set[str] = set()
        capacity_types: set[str] = set()
        subnet_zones = snap.node_class_zones.get(pool.node_class_ref)
        for instance_type in snap.instance_types:
            labels = instance_type_labels(instance_type)
            if not all(requirement_allows(requirement, labels.get(requirement.key))
                       for requirement in type_requirements):
                continue
            offers = {}
            for zone, capacity_type, price in by_type.get(instance_type.name, ()):
                if ((capacity_type == "spot" and not instance_type.supports_spot)
                        or (capacity_type == "on-demand" and not instance_type.supports_on_demand)):
                    continue
                if subnet_zones is not None and zone not in subnet_zones:
                    continue  # the node class has no subnet there: EC2 could not launch it
                # A reservation is on-demand capacity: a pool allowing only `reserved` is planned on
                # on-demand offerings and launched into its reservations (app/launcher.py).
                if all(requirement_allows(requirement, zone) for requirement in zone_requirements) and (all(
                        requirement_allows(requirement, capacity_type) for requirement in capacity_requirements)
                        or (capacity_type == "on-demand" and reserved)):
                    offers[(zone, capacity_type)] = price
            if not offers:
                continue
            room = allocatable(instance_type, kubelet=kubelet, root_volume_bytes=root, ami_family=family)
            node_labels = {**labels, **pool_labels}
            offered_zones = {zone for zone, _ in offers}
            offered_types = {capacity_type for _, capacity_type in offers}
            # Karpenter's getDaemonOverhead: a DaemonSet counts when its pod is compatible with what such a
            # node may be (its zone and capacity type not decided yet), and exactly once they are
            # (``PoolType.allocatable_on``).
            overhead = _daemon_overhead(daemons, node_labels, pool, offered_zones, offered_types)
            exact = {(zone, capacity_type): vector(keys, res.subtract(room, _daemon_overhead(
                daemons, node_labels, pool, {zone}, {capacity_type})))
                for zone, capacity_type in offers} if overhead else {}
            types.append(PoolType(
                instance_type.name, labels, vector(keys, res.subtract(room, overhead)),
                {**capacity(instance_type, kubelet=kubelet, root_volume_bytes=root), "nodes": 1}, offers, overhead,
                allocatable_by_offering=exact))
            zones.update(zone for zone, _ in offers)
            capacity_types.update(capacity_type for _, capacity_type in offers)
        custom: dict[str, list[Requirement]] = defaultdict(list)
        for requirement in pool.requirements:
            if requirement.key not in WELL_KNOWN_KEYS:
                custom[requirement.key].append(requirement)
        ports = {port: f"{daemonset.namespace}/{daemonset.name}"
                 for daemonset in landing for port in daemonset.template.host_ports}
        out.append(PoolPart(pool, tuple(types), frozenset(zones), frozenset(capacity_types), dict(custom), ports))
    return out


def _daemon_overhead(daemons: Sequence[Pod], node_labels: Mapping[str, str], pool: NodePool, zones: set[str],
                     capacity_types: set[str]) -> dict[str, int]:
    """The summed requests of the DaemonSet pods that may land on a node with ``node_labels`` (its
    instance type's and NodePool's) in one of ``zones`` with one of ``capacity_types``."""
    overhead: dict[str, int] = {}
    for daemon in daemons:
        if any(all(_compatible(requirement, node_labels, pool, zones, capacity_types) for requirement in variant)
               for variant in required_variants(daemon)):
            overhead = res.add(overhead, daemon.requests)
    return overhead


def _compatible(requirement: Requirement, node_labels: Mapping[str, str], pool: NodePool, zones: set[str],
                capacity_types: set[str]) -> bool:
    """Whether a DaemonSet pod's node requirement may hold on such a node (Karpenter's ``Compatible``)."""
    if requirement.key in ZONE_KEYS and requirement.key not in node_labels:
        return any(requirement_allows(requirement, zone) for zone in zones)
    if requirement.key == CAPACITY_TYPE_LABEL and requirement.key not in node_labels:
        return any(requirement_allows(requirement, capacity_type) for capacity_type in capacity_types)
    if requirement.key in node_labels or requirement.key in WELL_KNOWN_KEYS:
        return label_satisfies(requirement, node_labels)
    custom = [own for own in pool.requirements if own.key == requirement.key]
    if custom:
        return intersect(requirement, custom) is not False
    return requirement_allows(requirement, None)


@dataclass(frozen=True, slots=True)
class Prepared:
    """What a warm caller hands a plan (absent: the plan derives it)."""

    pools: PoolTable | None = None
