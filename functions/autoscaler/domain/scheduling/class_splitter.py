"""Splitting a pod class over the values of a key other than zone, capacity type and hostname
(architecture, a NodePool label...) as its spread, affinity and anti-affinity on that key decide; and
handing the pods a spread cannot place to a child class that gives up a preferred node affinity."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from autoscaler.domain.models import Pod, Requirement
from autoscaler.domain.plan import Unschedulable
from autoscaler.domain.scheduling.class_queue import ClassQueue
from autoscaler.domain.scheduling.existing_node import ExistingNode
from autoscaler.domain.scheduling.instance_type_index import InstanceTypeIndex
from autoscaler.domain.scheduling.pod_class import PodClass
from autoscaler.domain.scheduling.selector_index import selects
from autoscaler.domain.scheduling.spread import spread, water_fill
from autoscaler.domain.scheduling.topology import Topology, is_generic
from autoscaler.domain.scheduling.vector import UNBOUNDED


class ClassSplitter:
    def __init__(self, classes: list[PodClass], existing: Sequence[ExistingNode], index: InstanceTypeIndex,
                 topology: Topology, unschedulable: list[Unschedulable]) -> None:
        self.classes = classes
        self.existing = existing
        self.index = index
        self.topology = topology
        self.unschedulable = unschedulable
        self.requeue: list[PodClass] = []  # classes made while placing, to be placed next

    def split_all(self, queue: ClassQueue) -> None:
        """Replace the head of ``queue`` by its children while it has a key to be split on."""
        while queue:
            cls = queue.head()
            key = self.topology.generic_key(cls) if cls.error is None else None
            if key is None:
                return
            queue.popleft()
            queue.extendleft(reversed(self.split(cls, key)))

    def split(self, cls: PodClass, key: str) -> list[PodClass]:
        """Split ``cls`` per value of ``key`` as its spread, affinity and anti-affinity on that key (and
        other classes' anti-affinity towards it) decide; children carry ``key In [value]``. Pods that
        fit nowhere are reported. Returns the children still to place."""
        topology, sample, namespace = self.topology, cls.sample, cls.sample.namespace
        pinned_keys = {pod_key for node in self.existing for pod_key in node.pinned.get(cls.id, ())}
        rest = [pod for pod in cls.pods if pod.key not in pinned_keys]
        cls.pods = [pod for pod in cls.pods if pod.key in pinned_keys]
        total = len(rest)
        usable, room = topology.usable(cls, key)
        banned = topology.banned_by_others(cls, key)
        usable -= banned
        reason = (f"pod anti-affinity on {key}: every value of {key} it may use holds a pod whose anti-affinity "
                  "excludes it") if banned and not usable else ""
        own = any(term.topology_key == key for term in (*sample.pod_affinity, *sample.pod_anti_affinity))
        spreads = [constraint for constraint in sample.topology_spread
                   if constraint.topology_key == key and is_generic(key, spread=True)
                   and selects(constraint.label_selector, owner_namespace=namespace, candidate=cls)]
        if not usable and not own and not spreads and not banned:
            child = self.child(cls, rest, key, None)  # only followed by others, with no value to pin it to
            self._set_counts(cls, topology.counts_for(cls, len(cls.pods)))
            return [] if self.resolve_child(child) else [child]
        for term in sample.pod_anti_affinity:
            if term.topology_key != key:
                continue
            counts = topology.matching_counts(cls, term, key, namespaces=term.namespaces)
            usable = {value for value in usable if not counts.get(value)}
            if selects(term, owner_namespace=namespace, candidate=cls):
                room = {value: min(room.get(value, 1), 1) for value in usable}
        for term in sample.pod_affinity:
            if term.topology_key != key:
                continue
            counts = topology.matching_counts(cls, term, key, namespaces=term.namespaces)
            have = sorted((value for value in usable if counts.get(value)), key=lambda value: (-counts[value], value))
            if have:
                usable = {have[0]}
            elif not selects(term, owner_namespace=namespace, candidate=cls):
                usable = set()
                reason = f"pod affinity on {key}: no pod matches its required podAffinity"
            elif usable:
                usable = {min(usable)}
        got: dict[str, int] = {}
        over = total
        if not usable:
            reason = reason or (f"topology spread on {key}: no NodePool or node it may use has label {key}"
                                if spreads else f"pod (anti-)affinity on {key}: every value of {key} it may "
                                "use is excluded")
        elif spreads:
            constraint = spreads[0]
            every = topology.spread_every(cls, constraint) | usable
            counts = topology.matching_counts(cls, constraint.label_selector, key, spread=constraint)
            hard = constraint.when_unsatisfiable == "DoNotSchedule"
            min_zero = hard and constraint.min_domains is not None and len(every) < constraint.min_domains
            got, over = spread(usable, every, counts, total, max_skew=constraint.max_skew, min_zero=min_zero,
                               room=room)
            if over and not hard:
                extra = water_fill(usable, {value: counts.get(value, 0) + got.get(value, 0) for value in usable},
                                   over, room={value: left - got.get(value, 0) for value, left in room.items()})
                for value, count in extra.items():
                    got[value] = got.get(value, 0) + count
                over = total - sum(got.values())
            reason = (f"topology spread on {key}: maxSkew {constraint.max_skew} would be exceeded in every domain "
                      "it may use")
        else:
            # Affinity / anti-affinity only: one value for all (affinity left one), one pod per value
            # for self anti-affinity, else values in order.
            self_anti = any(term.topology_key == key and selects(term, owner_namespace=namespace, candidate=cls)
                            for term in sample.pod_anti_affinity)
            if not self_anti and not any(term.topology_key == key for term in sample.pod_anti_affinity):
                usable = {min(usable)}  # a follower's target, or affinity: all in one domain
            for value in sorted(usable):
                count = min(over, 1 if self_anti else room.get(value, UNBOUNDED))
                if count > 0:
                    got[value] = count
                    over -= count
                if not over:
                    break
            reason = reason or (f"pod anti-affinity on {key}: every value of {key} it may use already has a "
                                "matching pod")
        children: list[PodClass] = []
        start = 0
        for value, count in sorted(got.items()):
            if count <= 0:
                continue
            children.append(self.child(cls, rest[start:start + count], key, value))
            start += count
        if start < total:
            left = self.child(cls, rest[start:], key, None)
            self._set_counts(left, {})  # placed nowhere
            left.reject(len(left.pods), reason, self.unschedulable)
        self._set_counts(cls, topology.counts_for(cls, len(cls.pods)))
        return [child for child in children if not self.resolve_child(child)]

    def child(self, parent: PodClass, pods: list[Pod], key: str, value: str | None) -> PodClass:
        """A new class of ``pods`` split off ``parent`` (with ``key In [value]`` when a value is given)."""
        extra = (Requirement(key, "In", (value,)),) if value is not None else ()
        handled = parent.handled | {key} if key else parent.handled
        child = replace(parent, id=len(self.classes), pods=pods, placed=0, targets=[], conflicts=set(parent.conflicts),
                        variants=[parent.variant + extra], required_variants=list(parent.required_variants),
                        handled=handled, host_spread=list(parent.host_spread))
        counts = self.topology.counts_for(parent, len(pods))
        if value is not None:
            counts[key] = {value: len(pods)}
        self._set_counts(child, counts)
        self.classes.append(child)
        if parent.id in parent.conflicts:
            child.conflicts.add(child.id)
        for other in self.classes:
            if parent.id in other.conflicts:
                other.conflicts.add(child.id)
            other.host_spread = [(skew, ids | {child.id} if parent.id in ids else ids, constraint)
                                 for skew, ids, constraint in other.host_spread]
        if parent.id in self.topology.host_targets:
            self.topology.host_targets.add(child.id)
        if parent.id in self.topology.pinned:
            self.topology.pinned[child.id] = set(self.topology.pinned[parent.id])
        return child

    def relax(self, cls: PodClass, count: int) -> bool:
        """Hand ``count`` of ``cls``'s pods that a topology spread cannot place to a child that gives up
        its heaviest remaining preferred node affinity (Karpenter relaxes a pod that fails); False when
        ``cls`` has no preference left to give up."""
        position = cls.variants.index(cls.variant) if cls.variant in cls.variants else len(cls.variants)
        if position + 1 >= len(cls.variants) or count > len(cls.pods) - cls.placed:
            return False
        moved, cls.pods = cls.pods[len(cls.pods) - count:], cls.pods[:len(cls.pods) - count]
        child = self.child(cls, moved, "", None)
        self._set_counts(child, self.topology.counts_for(cls, len(moved)))
        self._set_counts(cls, self.topology.counts_for(cls, len(cls.pods)))
        child.variants, child.handled = cls.variants[position + 1:], cls.handled
        if not self.resolve_child(child):
            self.requeue.append(child)
        return True

    def resolve_child(self, child: PodClass) -> bool:
        """Resolve a child's NodePool targets; report its pods when none fits (True)."""
        error = self.index.resolve(child, self.existing)
        if error is not None:
            child.reject(len(child.pods), error, self.unschedulable)
            return True
        return False

    def _set_counts(self, cls: PodClass, counts: dict[str, dict[str, int]]) -> None:
        self.topology.domain_counts[cls.id] = counts
