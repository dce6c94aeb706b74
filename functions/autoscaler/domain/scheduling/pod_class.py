"""Pod classes: pending pods with the same requests, labels and constraints (the replicas of one
Deployment) are one class and are placed by arithmetic; a class's node requirement variants in
Karpenter's order, its volumes' zones, the classes it may not share a node with, and how many of its
pods a node may hold."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from autoscaler.domain.keys import HOSTNAME_LABEL
from autoscaler.domain.models import (
    PersistentVolume,
    PersistentVolumeClaim,
    Pod,
    StorageClass,
    TopologySpreadConstraint,
    host_ports_overlap,
)
from autoscaler.domain.plan import PlanInput, Unschedulable
from autoscaler.domain.scheduling.requirements import Variant, required_variants, variants
from autoscaler.domain.scheduling.selector_index import SelectorIndex, selects
from autoscaler.domain.scheduling.target import Target
from autoscaler.domain.scheduling.vector import UNBOUNDED, Vec, vector


@dataclass(eq=False, slots=True)
class PodClass:
    id: int
    sample: Pod  # the first pod: every pod of the class has its requests, labels and constraints
    pods: list[Pod]
    request: Vec
    variants: list[Variant]
    zone_pin: frozenset[str] | None = None  # the zones its volumes allow
    error: str | None = None
    # decided during planning
    targets: list[Target] = field(default_factory=list)
    variant: Variant = ()
    cap: int = UNBOUNDED  # pods of this class per node
    conflicts: set[int] = field(default_factory=set)  # classes it may not share a node with
    # hostname spread: (maxSkew, ids of the classes its selector matches, the constraint)
    host_spread: list[tuple[int, frozenset[int], TopologySpreadConstraint]] = field(default_factory=list)
    placed: int = 0  # pods placed or reported so far
    # the variants without preferred node affinity (nodeAffinityPolicy Honor looks at these only)
    required_variants: list[Variant] = field(default_factory=list)
    handled: frozenset[str] = frozenset()  # keys this class was split on (class_splitter.py)

    @property
    def shapes_nodes(self) -> bool:
        """Hostname anti-affinity, host ports or hostname spread bound how many of its pods a node holds:
        such a class opens nodes of its own shape instead of joining a group's packing."""
        return self.cap < UNBOUNDED or bool(self.conflicts)

    def reject(self, count: int, reason: str, into: list[Unschedulable]) -> None:
        """Report its next ``count`` pods as unschedulable for ``reason``."""
        for pod in self.pods[self.placed:self.placed + count]:
            into.append(Unschedulable(pod.key, reason))
        self.placed += count

    def conflicts_on(self, placed: Mapping[int, int], bound: Sequence[Pod]) -> bool:
        """Whether a node holding ``placed`` (class id -> pods) and the ``bound`` pods excludes this class:
        hostname anti-affinity either way, or a host port already taken."""
        if self.conflicts and any(other in self.conflicts for other in placed):
            return True
        if not bound:
            return False
        namespace, ports = self.sample.namespace, self.sample.host_ports
        for pod in bound:
            for term in self.sample.pod_anti_affinity:
                if term.topology_key == HOSTNAME_LABEL and selects(term, owner_namespace=namespace, candidate=pod):
                    return True
            for term in pod.pod_anti_affinity:
                if term.topology_key == HOSTNAME_LABEL and selects(term, owner_namespace=pod.namespace,
                                                                   candidate=self):
                    return True
            if ports and pod.host_ports and host_ports_overlap(ports, pod.host_ports):
                return True
        return False

    def room_on(self, placed: Mapping[int, int], bound: Sequence[Pod]) -> int:
        """Pods of this class a node holding ``placed`` and ``bound`` may still take: its own cap, and for
        each hostname spread constraint maxSkew minus the matching pods already there (a new node is
        always a domain with zero, so the minimum is zero and skew is the node's own count)."""
        room = self.cap - placed.get(self.id, 0)
        for skew, ids, constraint in self.host_spread:
            have = sum(count for other, count in placed.items() if other in ids)
            if bound:
                have += sum(1 for pod in bound if selects(constraint.label_selector,
                                                          owner_namespace=self.sample.namespace, candidate=pod))
            room = min(room, skew - have)
        return room


@dataclass(eq=False, slots=True)
class PodChunk:
    """Pods of one class still to place, limited to some zones and capacity types."""

    cls: PodClass
    zones: frozenset[str] | None
    capacity_types: frozenset[str] | None
    left: int


def selected_label_keys(pods: Iterable[Pod]) -> frozenset[str]:
    """Every label key a label selector of these pods looks at (spread constraints, pod affinity and
    anti-affinity, required and preferred): the only labels that can tell two pending pods apart here."""
    keys: set[str] = set()
    for pod in pods:
        if not (pod.topology_spread or pod.pod_affinity or pod.pod_anti_affinity or pod.preferred_pod_affinity
                or pod.preferred_pod_anti_affinity):
            continue
        selectors = [term.label_selector for term in pod.topology_spread]
        selectors += [term.label_selector for term in (*pod.pod_affinity, *pod.pod_anti_affinity)]
        selectors += [term.label_selector for _, term in (*pod.preferred_pod_affinity,
                                                          *pod.preferred_pod_anti_affinity)]
        for selector in selectors:
            if selector is not None:
                keys.update(key for key, _ in selector.match_labels)
                keys.update(expression.key for expression in selector.match_expressions)
    return frozenset(keys)


def class_key(pod: Pod, label_keys: frozenset[str] | None = None) -> tuple[object, ...]:
    """Pods with equal keys schedule alike. Only the labels in ``label_keys`` (``selected_label_keys`` of
    every pod, pending and bound) count: a StatefulSet's pods differ in ``statefulset.kubernetes.io/pod-name``
    and a Job's in their completion index, and one class per pod made planning quadratic in pods."""
    labels = pod.labels.items() if label_keys is None else (
        (key, value) for key, value in pod.labels.items() if key in label_keys)
    return (
        pod.namespace, tuple(sorted(labels)), tuple(sorted(pod.requests.items())),
        tuple(sorted(pod.node_selector.items())), pod.required_node_affinity, pod.preferred_node_affinity,
        pod.tolerations, pod.topology_spread, pod.pod_affinity, pod.pod_anti_affinity, pod.host_ports,
        pod.volume_claims,
    )


def build_classes(pending: list[Pod], snap: PlanInput, keys: Sequence[str]) -> list[PodClass]:
    """The classes of ``pending``, with their volumes' zones, conflicts and per-node caps."""
    groups: dict[tuple[object, ...], list[Pod]] = {}
    label_keys = selected_label_keys(snap.pods)
    for pod in pending:
        groups.setdefault(class_key(pod, label_keys), []).append(pod)
    claims = {(claim.namespace, claim.name): claim for claim in snap.pvcs}
    volumes = {volume.name: volume for volume in snap.pvs}
    storage_classes = {storage.name: storage for storage in snap.storage_classes}
    out = []
    for number, pods in enumerate(groups.values()):
        sample = pods[0]
        cls = PodClass(id=number, sample=sample, pods=pods, request=vector(keys, sample.requests),
                       variants=variants(sample), required_variants=required_variants(sample))
        _pin_to_volume_zones(cls, claims, volumes, storage_classes)
        out.append(cls)
    _add_conflicts(out)
    return out


def _pin_to_volume_zones(cls: PodClass, claims: Mapping[tuple[str, str], PersistentVolumeClaim],
                         volumes: Mapping[str, PersistentVolume], storage_classes: Mapping[str, StorageClass]) -> None:
    sample = cls.sample
    for name in sample.volume_claims:
        claim = claims.get((sample.namespace, name))
        if claim is None and name in sample.ephemeral_claims:
            # not created yet from the pod's ephemeral volume template: provisioned like a
            # WaitForFirstConsumer claim of the template's StorageClass
            storage = storage_classes.get(sample.ephemeral_claims[name])
            if storage is not None and storage.zones:
                cls.zone_pin = frozenset(storage.zones) if cls.zone_pin is None else cls.zone_pin & frozenset(
                    storage.zones)
            continue
        if claim is None:
            cls.error = f"PersistentVolumeClaim {sample.namespace}/{name} not found"
            break
        zones: tuple[str, ...] = ()
        if claim.volume_name:
            volume = volumes.get(claim.volume_name)
            zones = volume.zones if volume else ()
        else:
            storage = storage_classes.get(claim.storage_class or "")
            if storage is not None and storage.volume_binding_mode != "WaitForFirstConsumer":
                cls.error = (f"PersistentVolumeClaim {sample.namespace}/{name} is not bound yet "
                             f"(StorageClass {storage.name} binds Immediately)")
                break
            zones = storage.zones if storage else ()
        if zones:
            cls.zone_pin = frozenset(zones) if cls.zone_pin is None else cls.zone_pin & frozenset(zones)
    if cls.zone_pin is not None and not cls.zone_pin:
        cls.error = "its volumes are in different zones"


def _add_conflicts(classes: list[PodClass]) -> None:
    """Conflicts (hostname anti-affinity both ways, shared host ports) and per-node caps. Each selector is
    answered once for every class (``SelectorIndex``), not once per pair of classes."""
    selected = SelectorIndex(classes)
    shaped = [cls for cls in classes if cls.sample.pod_anti_affinity or cls.sample.host_ports
              or cls.sample.pod_affinity
              or any(term.topology_key == HOSTNAME_LABEL for term in cls.sample.topology_spread)]
    avoided_by: dict[int, set[int]] = {}  # class id -> the classes whose hostname anti-affinity selects it
    for owner in classes:
        for term in owner.sample.pod_anti_affinity:
            if term.topology_key == HOSTNAME_LABEL:
                for target in selected.selected(term, owner_namespace=owner.sample.namespace):
                    avoided_by.setdefault(target.id, set()).add(owner.id)
    with_ports = [cls for cls in classes if cls.sample.host_ports]
    for cls in shaped:
        sample = cls.sample
        for constraint in sample.topology_spread:
            if constraint.topology_key == HOSTNAME_LABEL:
                ids = frozenset(other.id for other in selected.selected(constraint.label_selector,
                                                                        owner_namespace=sample.namespace))
                cls.host_spread.append((constraint.max_skew, ids, constraint))
                if cls.id in ids:
                    cls.cap = min(cls.cap, constraint.max_skew)
        partners = set(avoided_by.get(cls.id, ()))
        for term in sample.pod_anti_affinity:
            if term.topology_key == HOSTNAME_LABEL:
                partners.update(other.id for other in selected.selected(term, owner_namespace=sample.namespace))
        ports = sample.host_ports
        if ports:
            partners.update(other.id for other in with_ports if host_ports_overlap(ports, other.sample.host_ports))
        for other_id in sorted(partners):  # in class order, as a walk over every class would add them
            cls.conflicts.add(other_id)
            classes[other_id].conflicts.add(cls.id)
        if cls.id in cls.conflicts:
            cls.cap = 1
