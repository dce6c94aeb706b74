"""Topology for the planner, on any label key: the domains a spread constraint is measured over and
those a class can still use (with how many pods each can take), the pods each class has put in each
domain and matching-pod counts per domain, the domains other pods' anti-affinity bans, the classes
others follow onto their node or into their domain, and the order classes are placed in so pod
(anti-)affinity sees its targets first."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

from autoscaler.domain.keys import CAPACITY_TYPE_LABEL, HOSTNAME_LABEL, WELL_KNOWN_KEYS, ZONE_KEYS, ZONE_LABEL
from autoscaler.domain.models import (
    LabelSelector,
    Pod,
    PodAffinityTerm,
    TopologySpreadConstraint,
    untolerated_taints,
)
from autoscaler.domain.nodepool import requirement_allows
from autoscaler.domain.scheduling.existing_node import ExistingNode, GroupHolders, holders_by_group
from autoscaler.domain.scheduling.instance_type_index import InstanceTypeIndex
from autoscaler.domain.scheduling.pod_class import PodClass
from autoscaler.domain.scheduling.pool_type import INFINITE_PRICE
from autoscaler.domain.scheduling.rejection import Rejection
from autoscaler.domain.scheduling.requirements import Variant
from autoscaler.domain.scheduling.selector_index import SelectorIndex, selects
from autoscaler.domain.scheduling.target import Target
from autoscaler.domain.scheduling.vector import fit_count, fits_within

Selector = PodAffinityTerm | LabelSelector | None
DomainCounts = dict[str, int]  # value of a key -> pods


def is_generic(key: str, *, spread: bool = False) -> bool:
    """A topology key placed by splitting the class per value: not zone or hostname, nor capacity type
    for topology spread (placement splits those by counts)."""
    return key not in ZONE_KEYS and key != HOSTNAME_LABEL and not (spread and key == CAPACITY_TYPE_LABEL)


def label_of(key: str) -> str:
    """The node label a topology key reads (either zone key reads the zone)."""
    return ZONE_LABEL if key in ZONE_KEYS else key


class Topology:
    def __init__(self, classes: list[PodClass], existing: Sequence[ExistingNode], index: InstanceTypeIndex,
                 soft: Mapping[str, frozenset[PodAffinityTerm]]) -> None:
        self.classes = classes  # shared with the scheduler: the classes split off later are appended
        self.existing = existing
        self.index = index
        # pod key -> its preferred terms this plan takes as required: they bind the pod itself only, never
        # other pods (kube-scheduler's symmetry is for required anti-affinity)
        self.soft = soft
        self.zone_counts: dict[int, DomainCounts] = {}  # class id -> zone -> its pods put there
        self.domain_counts: dict[int, dict[str, DomainCounts]] = {}  # class id -> other key -> value -> pods
        self.host_targets: set[int] = set()  # classes others follow onto their node
        self.pinned: dict[int, set[str]] = {}  # class id -> keys it must take one value of
        self.bound_anti: list[tuple[ExistingNode, Pod]] = [
            (node, pod) for node in existing for pod in node.bound if pod.pod_anti_affinity]
        self._holders: dict[int, GroupHolders] | None = None  # built at the first count (bound pods do not change)
        self.selected = SelectorIndex(classes)  # which classes a selector selects
        # label -> the classes whose hard anti-affinity has a term on it, in class order (``banned_by_others``);
        # classes[:_avoiders_seen] are sorted in
        self._avoiders: dict[str, list[PodClass]] = {}
        self._avoiders_seen = 0

    def hard_anti(self, pod: Pod) -> Iterable[PodAffinityTerm]:
        """The pod's anti-affinity terms that bind other pods too (not the preferences taken as required)."""
        soft = self.soft.get(pod.key)
        return pod.pod_anti_affinity if not soft else (term for term in pod.pod_anti_affinity if term not in soft)

    # --- counts ------------------------------------------------------------------------------------------

    def placed_counts(self, cls: PodClass, label: str) -> DomainCounts | None:
        """The pods ``cls`` has put per value of ``label``."""
        if label == ZONE_LABEL:
            return self.zone_counts.get(cls.id)
        return self.domain_counts.get(cls.id, {}).get(label)

    def add_to_zone(self, cls: PodClass, zone: str, count: int) -> None:
        zones = self.zone_counts.setdefault(cls.id, {})
        zones[zone] = zones.get(zone, 0) + count

    def add_to_domain(self, cls: PodClass, key: str, value: str, count: int) -> None:
        values = self.domain_counts.setdefault(cls.id, {}).setdefault(key, {})
        values[value] = values.get(value, 0) + count

    def counts_for(self, cls: PodClass, pods: int) -> dict[str, DomainCounts]:
        """``cls``'s values on the keys it was split on (one each), counting ``pods`` pods."""
        return {key: dict.fromkeys(values, pods) for key, values in self.domain_counts.get(cls.id, {}).items()
                if pods}

    # --- domains -----------------------------------------------------------------------------------------

    def values(self, target: Target, key: str) -> set[str] | None:
        """The values ``key`` may take on a new node of ``target``; None when not enumerable (a NodePool
        requirement ``Exists`` without values)."""
        if key in ZONE_KEYS:
            return set(target.zones)
        if key == CAPACITY_TYPE_LABEL:
            return set(target.capacity_types)
        pool = target.pool.pool
        if key in target.labels:
            return {target.labels[key]}
        if key in pool.labels:
            return {pool.labels[key]}
        if key in target.pool.custom:
            allowed: set[str] | None = None
            for requirement in target.pool.custom[key]:
                if requirement.operator == "In":
                    allowed = set(requirement.values) if allowed is None else allowed & set(requirement.values)
            if allowed is None:
                return None
            return {value for value in allowed
                    if all(requirement_allows(requirement, value) for requirement in target.pool.custom[key])}
        if key in WELL_KNOWN_KEYS:
            return {value for pool_type in target.types if (value := pool_type.labels.get(key)) is not None}
        return set()

    @staticmethod
    def required(pod_class: PodClass) -> Variant:
        """The class's variant without its preferred node affinity (what kube's nodeAffinityPolicy
        ``Honor`` looks at): the required variant it extends."""
        for variant in pod_class.required_variants:
            if pod_class.variant[:len(variant)] == variant:
                return variant
        return pod_class.variant

    def spread_every(self, cls: PodClass, constraint: TopologySpreadConstraint) -> set[str]:
        """Every domain the skew is measured over: those of the NodePools and nodes the node policies
        admit, whether or not this pod may go there (a volume pinned to one zone does not remove the
        others from the skew, as in kube-scheduler)."""
        required = self.required(cls) if constraint.node_affinity_policy == "Honor" else ()
        out: set[str] = set()
        for view in self.index.pools:
            if constraint.node_taints_policy == "Honor" and untolerated_taints(cls.sample.tolerations,
                                                                                view.pool.taints):
                continue
            target = self.index.policy_target(cls, required, view)
            if not isinstance(target, Rejection):
                out |= self.values(target, constraint.topology_key) or set()
        label = label_of(constraint.topology_key)
        for node in self.existing:
            if node.labels.get(label) is not None and self.spread_node(cls, node, constraint):
                out.add(node.labels[label])
        return out

    def spread_node(self, cls: PodClass, node: ExistingNode, constraint: TopologySpreadConstraint) -> bool:
        """Whether an existing node is a domain of ``constraint`` (nodeAffinityPolicy, nodeTaintsPolicy)."""
        if constraint.node_affinity_policy == "Honor" and not node.admits(cls, self.required(cls), taints=False,
                                                                          volumes=False):
            return False
        return constraint.node_taints_policy == "Ignore" or not untolerated_taints(cls.sample.tolerations, node.taints)

    @staticmethod
    def launchable(target: Target, pod_class: PodClass) -> bool:
        """Whether the NodePool can still launch a node for ``pod_class`` (not at its limits)."""
        if not target.pool.pool.limits:
            return True
        return any(target.pool.within_limits(pool_type) for pool_type in target.types
                   if fits_within(pod_class.request, pool_type.allocatable))

    def usable(self, cls: PodClass, key: str) -> tuple[set[str], dict[str, int]]:
        """The domains ``cls`` can be placed in and, for those no NodePool can launch in, how many of its
        pods the existing nodes there still take (domains absent from the map are unbounded)."""
        launch: set[str] = set()
        for target in cls.targets:
            if self.launchable(target, cls):
                launch |= self.values(target, key) or set()
        room: dict[str, int] = defaultdict(int)
        label = label_of(key)
        for node in self.existing:
            value = node.labels.get(label)
            if value is None or value in launch or not node.admits(cls, cls.variant) or node.conflicts_with(cls):
                continue
            room[value] += max(0, min(fit_count(node.free, cls.request), node.room_for(cls)))
        if cls.zone_pin is not None and key in ZONE_KEYS:
            launch &= cls.zone_pin
            room = defaultdict(int, {zone: count for zone, count in room.items() if zone in cls.zone_pin})
        usable = launch | {value for value, count in room.items() if count > 0}
        return usable, {value: count for value, count in room.items() if value not in launch}

    def matching_counts(self, cls: PodClass, selector: Selector, key: str, *, namespaces: tuple[str, ...] = (),
                        spread: TopologySpreadConstraint | None = None) -> dict[str, int]:
        """Pods matching ``selector`` per domain of ``key``: bound ones plus those this plan has put in
        a domain already. For a spread constraint only nodes its node policies admit count."""
        label = label_of(key)
        namespace = cls.sample.namespace
        if self._holders is None:
            self._holders = holders_by_group(self.existing)
        # Only the nodes of the groups the selector selects (a selector decides alike for a group's pods);
        # each domain comes first where its first counted node stands among the existing nodes, as a walk
        # over every node would have met it.
        found: dict[str, list[int]] = {}  # value -> [position of its first counted node, pods]
        spread_ok: dict[int, bool] = {}  # position -> whether the spread's node policies admit the node
        for entry in self._holders.values():
            if not selects(selector, owner_namespace=namespace, candidate=entry.sample, namespaces=namespaces):
                continue
            for position, node, count in entry.holders:
                value = node.labels.get(label)
                if value is None:
                    continue
                if spread is not None:
                    admitted = spread_ok.get(position)
                    if admitted is None:
                        admitted = spread_ok[position] = self.spread_node(cls, node, spread)
                    if not admitted:
                        continue
                seen = found.get(value)
                if seen is None:
                    found[value] = [position, count]
                else:
                    seen[0], seen[1] = min(seen[0], position), seen[1] + count
        counts: dict[str, int] = defaultdict(int)
        for value, (_, count) in sorted(found.items(), key=lambda item: item[1][0]):
            counts[value] = count
        for other in self.selected.selected(selector, owner_namespace=namespace, namespaces=namespaces):
            placed = self.placed_counts(other, label)
            if placed:
                for value, count in placed.items():
                    counts[value] += count
        return counts

    def cheapest_zone(self, cls: PodClass, domains: set[str]) -> str:
        best: tuple[float, str] = (INFINITE_PRICE, min(domains))
        for target in cls.targets:
            for pool_type in target.types[:20]:
                for zone in domains & target.zones:
                    best = min(best, (pool_type.sizing_price(frozenset({zone}), target.capacity_types), zone))
        return best[1]

    def banned_by_others(self, cls: PodClass, key: str) -> set[str]:
        """Domains of ``key`` holding pods whose required anti-affinity on ``key`` selects ``cls``
        (anti-affinity is symmetric): bound pods and pods this plan has already put in a domain."""
        label = label_of(key)
        out: set[str] = set()
        for node, pod in self.bound_anti:
            value = node.labels.get(label)
            if value is not None and any(label_of(term.topology_key) == label and selects(
                    term, owner_namespace=pod.namespace, candidate=cls) for term in self.hard_anti(pod)):
                out.add(value)
        for other in self.avoiders(label):
            placed = self.placed_counts(other, label)
            if placed and any(label_of(term.topology_key) == label and selects(
                    term, owner_namespace=other.sample.namespace, candidate=cls)
                    for term in self.hard_anti(other.sample)):
                out |= {value for value, count in placed.items() if count}
        return out

    def avoiders(self, label: str) -> list[PodClass]:
        """The classes whose required anti-affinity (preferences taken as required aside) has a term on
        ``label``, in class order: the only ones that can ban a domain of it."""
        for other in self.classes[self._avoiders_seen:]:
            for term_label in dict.fromkeys(label_of(term.topology_key) for term in self.hard_anti(other.sample)):
                self._avoiders.setdefault(term_label, []).append(other)
        self._avoiders_seen = len(self.classes)
        return self._avoiders.get(label, [])

    # --- order -------------------------------------------------------------------------------------------

    def affinity_order(self, order: list[PodClass]) -> list[PodClass]:
        """``order`` changed only as far as needed for each class to come after the classes its pod
        affinity selects, so their domains are decided first. Also records which classes others follow
        or avoid (``host_targets``: onto their nodes; ``pinned``: into one zone or one value of another
        key)."""
        follows: dict[int, list[PodClass]] = defaultdict(list)
        live = [cls for cls in order if cls.error is None]
        position = {cls.id: number for number, cls in enumerate(live)}
        with_terms = [cls for cls in live if cls.sample.pod_affinity or cls.sample.pod_anti_affinity]
        for follower in with_terms:
            namespace = follower.sample.namespace
            # Only the classes one of its terms selects (``SelectorIndex``), in ``live`` order as a walk over
            # every class would meet them.
            matched = {other.id: other for term in (*follower.sample.pod_affinity, *follower.sample.pod_anti_affinity)
                       for other in self.selected.selected(term, owner_namespace=namespace) if other.id in position}
            for other in sorted(matched.values(), key=lambda other: position[other.id]):
                if other is follower:
                    continue
                for term in follower.sample.pod_affinity:
                    if selects(term, owner_namespace=namespace, candidate=other):
                        follows[follower.id].append(other)
                        if term.topology_key == HOSTNAME_LABEL:
                            self.host_targets.add(other.id)
                        else:
                            self.pinned.setdefault(other.id, set()).add(label_of(term.topology_key))
                for term in follower.sample.pod_anti_affinity:
                    # No order: whichever of the two comes first is pinned to a domain, the other avoids it
                    # (anti-affinity is checked both ways).
                    if term.topology_key != HOSTNAME_LABEL and selects(term, owner_namespace=namespace,
                                                                       candidate=other):
                        self.pinned.setdefault(follower.id, set()).add(label_of(term.topology_key))
                        self.pinned.setdefault(other.id, set()).add(label_of(term.topology_key))
        for _node, pod in self.bound_anti:  # bound pods' anti-affinity on other keys: the pods it selects take a value
            for term in self.hard_anti(pod):
                if is_generic(term.topology_key):
                    selected = [other for other in self.selected.selected(term, owner_namespace=pod.namespace)
                                if other.id in position]
                    for other in sorted(selected, key=lambda other: position[other.id]):
                        self.pinned.setdefault(other.id, set()).add(term.topology_key)
        if not follows:
            return order
        out: list[PodClass] = []
        state: dict[int, int] = {}  # 1 visiting, 2 done
        for root in order:
            if state.get(root.id):
                continue
            stack: list[tuple[PodClass, Iterable[PodClass]]] = [(root, iter(follows.get(root.id, ())))]
            state[root.id] = 1
            while stack:
                current, remaining = stack[-1]
                following = next((other for other in remaining if not state.get(other.id)), None)
                if following is None:
                    stack.pop()
                    state[current.id] = 2
                    out.append(current)
                else:
                    state[following.id] = 1
                    stack.append((following, iter(follows.get(following.id, ()))))
        return out

    def generic_key(self, cls: PodClass) -> str | None:
        """The first key other than zone, capacity type and hostname that ``cls`` still has to be split on."""
        for constraint in cls.sample.topology_spread:
            if is_generic(constraint.topology_key, spread=True) and constraint.topology_key not in cls.handled and (
                    selects(constraint.label_selector, owner_namespace=cls.sample.namespace, candidate=cls)):
                return constraint.topology_key
        for term in (*cls.sample.pod_affinity, *cls.sample.pod_anti_affinity):
            if is_generic(term.topology_key) and term.topology_key not in cls.handled:
                return term.topology_key
        for key in self.pinned.get(cls.id, ()):
            if is_generic(key) and key not in cls.handled:
                return key
        return None
