"""An existing node, or an in-flight instance not registered yet, as pending pods may be placed on it:
its labels, taints, the room left beside its bound pods, and the classes this plan puts there."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from autoscaler.domain.allocatable import allocatable
from autoscaler.domain.keys import CAPACITY_TYPE_LABEL, HOSTNAME_LABEL, NODEPOOL_LABEL, ZONE_LABEL
from autoscaler.domain.labels import instance_type_labels
from autoscaler.domain.models import Pod, Taint, untolerated_taints
from autoscaler.domain.plan import PlanInput
from autoscaler.domain.scheduling.node_pool_view import NodePoolView
from autoscaler.domain.scheduling.pod_class import PodClass
from autoscaler.domain.scheduling.prepared import ami_family_of, bound_pods, kubelet_of
from autoscaler.domain.scheduling.requirements import Variant, label_satisfies
from autoscaler.domain.scheduling.vector import Vec, minus, plus, vector


@dataclass(eq=False, slots=True)
class ExistingNode:
    name: str  # node name, or instance id of an in-flight instance
    labels: dict[str, str]
    taints: tuple[Taint, ...]
    limit: Vec  # the room it had for pending pods when the plan began
    used: Vec  # what this plan has put there
    zones: frozenset[str]
    capacity_types: frozenset[str]
    bound: Sequence[Pod] = ()  # its bound, unfinished pods
    launched_for: tuple[str, ...] = ()  # an in-flight instance's pods
    classes: dict[int, int] = field(default_factory=dict)  # class id -> pods this plan put there
    pinned: dict[int, list[str]] = field(default_factory=dict)  # class id -> pod keys placed by name
    free: Vec = ()
    # Its bound pods by (namespace, labels): (group id, one of them, how many). A selector decides the same for
    # every pod of a group, so counting matches asks it once per group, not once per pod (``LabelGroups``).
    label_groups: tuple[tuple[int, Pod, int], ...] = ()

    def __post_init__(self) -> None:
        self.free = minus(self.limit, self.used)

    def admits(self, cls: PodClass, variant: Variant, *, taints: bool = True, volumes: bool = True) -> bool:
        """Whether ``cls`` with requirements ``variant`` may run here (taints, volume zones, labels)."""
        if taints and untolerated_taints(cls.sample.tolerations, self.taints):
            return False
        if volumes and cls.zone_pin is not None and not (self.zones & cls.zone_pin):
            return False
        return all(label_satisfies(requirement, self.labels) for requirement in variant)

    def conflicts_with(self, cls: PodClass) -> bool:
        return cls.conflicts_on(self.classes, self.bound)

    def room_for(self, cls: PodClass) -> int:
        """Pods of ``cls`` its per-node bounds still allow here (resources aside)."""
        return cls.room_on(self.classes, self.bound)

    def add(self, cls: PodClass, count: int) -> None:
        """Put ``count`` pods of ``cls`` here (the class counts them as placed)."""
        self.used = plus(self.used, cls.request, count)
        self.free = minus(self.limit, self.used)
        self.classes[cls.id] = self.classes.get(cls.id, 0) + count
        cls.placed += count


class LabelGroups:
    """Numbers each distinct (namespace, labels) of bound pods once per plan. A cluster's thousands of bound pods
    carry a few dozen label sets (one per workload): at 2,000 nodes and 24,000 bound pods, asking each
    spread or affinity selector about every pod was a quarter of a 50k-pod plan's CPU."""

    def __init__(self) -> None:
        self.ids: dict[tuple[str, tuple[tuple[str, str], ...]], int] = {}

    def of(self, pods: Sequence[Pod]) -> tuple[tuple[int, Pod, int], ...]:
        samples: dict[int, Pod] = {}
        counts: dict[int, int] = {}
        for pod in pods:
            group = self.ids.setdefault((pod.namespace, tuple(sorted(pod.labels.items()))), len(self.ids))
            samples.setdefault(group, pod)
            counts[group] = counts.get(group, 0) + 1
        return tuple((group, samples[group], count) for group, count in counts.items())


@dataclass(eq=False, slots=True)
class GroupHolders:
    """The existing nodes holding bound pods of one label group: (position in the existing nodes, node, how
    many of the group's pods it holds), in the nodes' order."""

    sample: Pod
    holders: list[tuple[int, ExistingNode, int]] = field(default_factory=list)


def holders_by_group(existing: Sequence[ExistingNode]) -> dict[int, GroupHolders]:
    """Each label group's holders. A selector that selects none of a group's pods skips all of its nodes, so
    counting matching pods visits only the nodes of the groups it selects, not every node of the cluster."""
    out: dict[int, GroupHolders] = {}
    for position, node in enumerate(existing):
        for group, sample, count in node.label_groups:
            entry = out.get(group)
            if entry is None:
                entry = out[group] = GroupHolders(sample)
            entry.holders.append((position, node, count))
    return out


def existing_nodes(snap: PlanInput, keys: Sequence[str], pools: Sequence[NodePoolView]) -> list[ExistingNode]:
    """The schedulable existing nodes and the in-flight instances not registered yet."""
    bound = bound_pods(snap.pods)
    groups = LabelGroups()
    out = []
    registered = set()
    zero, launched_for = vector(keys, {}), snap.launched_for
    # Per node once: this loop runs over every existing node on every pass.
    for node in snap.nodes:
        instance_id = node.instance_id
        if instance_id:
            registered.add(instance_id)
        if node.unschedulable or node.deleting:
            continue
        bound_here, requests = bound.load(node.name)
        room = node.allocatable
        free = tuple(room.get(key, 0) - requests.get(key, 0) for key in keys)
        labels = {**node.labels, HOSTNAME_LABEL: node.labels.get(HOSTNAME_LABEL, node.name)}
        out.append(ExistingNode(
            node.name, labels, node.taints, free, zero, frozenset({node.zone or ""}),
            frozenset({node.labels.get(CAPACITY_TYPE_LABEL, "on-demand")}), bound=bound_here,
            launched_for=launched_for.get(instance_id or "", ()) if launched_for else (),
            label_groups=groups.of(bound_here)))
    types = {instance_type.name: instance_type for instance_type in snap.instance_types}
    by_name = {view.name: view for view in pools}
    for flight in snap.in_flight:
        instance_type = types.get(flight.instance_type)
        if instance_type is None or flight.instance_id in registered:
            continue
        view = by_name.get(flight.node_pool)
        kubelet, root = kubelet_of(view.pool, snap.node_classes) if view else (None, None)
        pool_type = next((candidate for candidate in view.types if candidate.name == instance_type.name),
                         None) if view else None
        limit = pool_type.allocatable if pool_type else vector(keys, allocatable(
            instance_type, kubelet=kubelet, root_volume_bytes=root,
            ami_family=ami_family_of(view.pool, snap.node_classes) if view else None))
        labels = {**instance_type_labels(instance_type), ZONE_LABEL: flight.zone,
                  CAPACITY_TYPE_LABEL: flight.capacity_type, NODEPOOL_LABEL: flight.node_pool,
                  **(view.pool.labels if view else {}), **flight.labels}
        out.append(ExistingNode(flight.instance_id, labels, flight.taints, limit, zero, frozenset({flight.zone}),
                                frozenset({flight.capacity_type}), launched_for=flight.pod_keys))
    return out
