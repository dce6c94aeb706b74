"""One plan over one ``PlanInput``, built fresh for each plan: the pod classes, NodePool views, existing
nodes, instance-type index, topology and the nodes it opens, and the placement that runs over them.

Placement, in order: in-flight instances take back the pods they were launched for; classes (after
those their pod affinity follows) are split per value of keys other than zone, capacity type and
hostname, then into (zones, capacity types, count) chunks by zone and capacity-type spread and zonal
(anti-)affinity; each chunk fills existing nodes and in-flight instances; classes that shape nodes
(a per-node cap, conflicts, hostname affinity) open nodes of their own shape; the flexible rest fills
those nodes and is then packed per group (``group_packer.py``); ``plan_writer.py`` writes the plan."""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping

from autoscaler.domain.keys import CAPACITY_TYPE_LABEL, HOSTNAME_LABEL, ZONE_KEYS, ZONE_LABEL
from autoscaler.domain.models import PodAffinityTerm, TopologySpreadConstraint
from autoscaler.domain.plan import Plan, PlanInput
from autoscaler.domain.scheduling.class_queue import ClassQueue
from autoscaler.domain.scheduling.class_splitter import ClassSplitter
from autoscaler.domain.scheduling.existing_node import ExistingNode, existing_nodes
from autoscaler.domain.scheduling.group_packer import GroupPacker
from autoscaler.domain.scheduling.instance_type_index import InstanceTypeIndex
from autoscaler.domain.scheduling.new_node import NewNode
from autoscaler.domain.scheduling.node_mix import duals
from autoscaler.domain.scheduling.node_pool_view import node_pool_views
from autoscaler.domain.scheduling.opened_nodes import OpenedNodes
from autoscaler.domain.scheduling.plan_writer import write_plan
from autoscaler.domain.scheduling.pod_class import PodChunk, PodClass, build_classes
from autoscaler.domain.scheduling.pool_type import INFINITE_PRICE
from autoscaler.domain.scheduling.prepared import Prepared, pending_pods, plan_keys
from autoscaler.domain.scheduling.rejection import Criterion, Rejection
from autoscaler.domain.scheduling.selector_index import selects
from autoscaler.domain.scheduling.spread import spread, water_fill
from autoscaler.domain.scheduling.target import Target
from autoscaler.domain.scheduling.topology import Topology
from autoscaler.domain.scheduling.vector import Vec, fit_count, plus

# A class's pods limited to some zones and capacity types (None: any), and how many.
Chunk = tuple[frozenset[str] | None, frozenset[str] | None, int]


class Scheduler:
    def __init__(self, snap: PlanInput, unavailable: Collection[tuple[str, str, str]], *,
                 prepared: Prepared | None = None,
                 soft: Mapping[str, frozenset[PodAffinityTerm]] | None = None) -> None:
        """``prepared``: what a warm caller kept from earlier passes (``prepared.py``); the decisions are the
        same without it. ``soft``: per pending pod, the preferred terms this plan takes as required."""
        self.plan = Plan()
        pending = pending_pods(snap)
        self.plan.pending_pods = len(pending)
        self.keys = plan_keys(pending)
        self.classes = build_classes(pending, snap, self.keys)
        self.pools = node_pool_views(snap, set(unavailable), self.keys, previous=prepared.pools if prepared else None)
        self.existing = existing_nodes(snap, self.keys, self.pools)
        self.index = InstanceTypeIndex(self.pools, self.keys)
        self.topology = Topology(self.classes, self.existing, self.index, soft or {})
        self.opened = OpenedNodes(self.keys)
        self.splitter = ClassSplitter(self.classes, self.existing, self.index, self.topology, self.plan.unschedulable)
        self.packer = GroupPacker(self.keys, self.index, self.opened)
        self.shares: dict[int, tuple[Vec, tuple[float, ...]]] = {}  # NodePool index -> ``share``
        # The existing nodes that may still take a pod: a node without room for the least request of every
        # class (classes split off later keep their parent's request) never will, and leaves this list.
        self.roomy: list[ExistingNode] = list(self.existing)
        self.least: Vec | None = tuple(min(amounts) for amounts in zip(*(cls.request for cls in self.classes),
                                                                       strict=True)) if self.classes else None

    def run(self) -> Plan:
        order = sorted(self.classes, key=lambda cls: (
            0 if any(term.topology_key == HOSTNAME_LABEL for term in cls.sample.pod_affinity) else
            1 if cls.shapes_nodes else 2 if cls.sample.pod_affinity else 3,
            tuple(-amount for amount in cls.request)))
        # Resolve every class before placing any: node sizing for shaped classes (``share``) needs
        # the whole pending demand of each NodePool, not just the classes placed so far.
        for cls in order:
            if cls.error is None:
                cls.error = self.index.resolve(cls, self.existing)
        self.place_launched_for()
        # Pod (anti-)affinity targets come before the classes that follow or avoid them.
        queue = ClassQueue(self.topology.affinity_order(order))
        flexible: list[PodChunk] = []  # pods of unshaped classes still to place
        placed_classes = 0
        while queue:
            self.splitter.split_all(queue)  # spread/affinity on keys other than zone, capacity type, hostname
            if not queue:
                break
            cls = queue.popleft()
            if cls.placed >= len(cls.pods):
                # Every pod went back onto the in-flight instance launched for it (``place_launched_for``): nothing
                # to place, and its spread and affinity terms need no counting (a pass after a burst holds
                # thousands of such pods, and counting walks every bound pod).
                continue
            placed_classes += 1
            if placed_classes % 8 == 0 and queue:  # drop nodes no remaining class could use
                self.opened.keep_useful(queue.floor())
            if cls.error is not None:
                cls.reject(len(cls.pods) - cls.placed, cls.error, self.plan.unschedulable)
                continue
            shaped = cls.shapes_nodes or cls.id in self.topology.host_targets or any(
                term.topology_key == HOSTNAME_LABEL for term in cls.sample.pod_affinity)
            for zones, capacity_types, count in self.chunks(cls):
                if shaped:
                    self.place(cls, zones, capacity_types, count)
                else:
                    left = self.place_existing(cls, zones, capacity_types, count)
                    if left:
                        flexible.append(PodChunk(cls, zones, capacity_types, left))
            queue.extendleft(reversed(self.splitter.requeue))  # pods that gave up a preference are placed next
            self.splitter.requeue.clear()
        # Classes free to go anywhere fill the nodes opened for shaped ones together, node by node,
        # balancing CPU against memory; what is left is packed in bulk.
        self.opened.fill(flexible)
        for chunk in flexible:
            if chunk.left:
                self.defer(chunk.cls, chunk.zones, chunk.capacity_types, chunk.left)
        late = self.packer.pack_all()
        write_plan(self.plan, classes=self.classes, existing=self.existing, new_nodes=self.opened.every,
                   late=late, index=self.index)
        return self.plan

    def place_launched_for(self) -> None:
        """Pods an in-flight instance was launched for go back onto it before anything else, so a later
        pass never launches again for them (when they still fit and still may go there)."""
        flights = [node for node in self.existing if node.launched_for]
        if not flights:
            return
        class_of = {pod.key: cls for cls in self.classes if cls.error is None for pod in cls.pods}
        for node in flights:
            for key in node.launched_for:
                cls = class_of.get(key)
                if cls is None:
                    continue
                # A pod that no longer fits here stays free for the next instance that names it (a
                # sibling of the same launch, an older claim) and then for ordinary placement.
                if (not node.admits(cls, cls.variant) or node.conflicts_with(cls)
                        or fit_count(node.free, cls.request) < 1 or node.room_for(cls) < 1):
                    continue
                del class_of[key]
                node.add(cls, 1)
                node.pinned.setdefault(cls.id, []).append(key)
                zone = node.labels.get(ZONE_LABEL)
                if zone:
                    self.topology.add_to_zone(cls, zone, 1)

    def chunks(self, cls: PodClass) -> list[Chunk]:
        """Split the class into (zones, capacity types, count) by spread, zonal affinity/anti-affinity."""
        topology, sample, namespace = self.topology, cls.sample, cls.sample.namespace
        count = len(cls.pods) - cls.placed
        banned = topology.banned_by_others(cls, ZONE_LABEL)
        zonal = banned or ZONE_LABEL in topology.pinned.get(cls.id, ()) or any(
            term.topology_key in ZONE_KEYS for term in (*sample.pod_affinity, *sample.pod_anti_affinity))
        usable = topology.usable(cls, ZONE_LABEL)[0] if zonal else set()  # only zonal (anti-)affinity needs it
        zone_sets: list[tuple[frozenset[str] | None, int]] = [(cls.zone_pin, count)]
        if banned:
            usable -= banned
            if not usable:
                self.reject(cls, count, "pod anti-affinity on zone: every zone it may use holds a pod whose "
                            "anti-affinity excludes it")
                return []
            zone_sets = [(frozenset(usable), count)]
        for term in sample.pod_affinity:
            if term.topology_key not in ZONE_KEYS:
                continue
            counts = topology.matching_counts(cls, term, ZONE_LABEL, namespaces=term.namespaces)
            have = sorted((zone for zone in counts if zone in usable), key=lambda zone: (-counts[zone], zone))
            if have:
                zone_sets = [(frozenset({have[0]}), count)]
            elif selects(term, owner_namespace=namespace, candidate=cls) and usable:
                zone_sets = [(frozenset({topology.cheapest_zone(cls, usable)}), count)]
            else:
                self.reject(cls, count, "pod affinity: no pod in any zone matches its required podAffinity")
                return []
        for term in sample.pod_anti_affinity:
            if term.topology_key not in ZONE_KEYS:
                continue
            counts = topology.matching_counts(cls, term, ZONE_LABEL, namespaces=term.namespaces)
            free = sorted(zone for zone in usable if counts.get(zone, 0) == 0)
            if selects(term, owner_namespace=namespace, candidate=cls):
                zone_sets = [(frozenset({zone}), 1) for zone in free[:count]]
                if count > len(free):
                    self.reject(cls, count - len(free), "pod anti-affinity on zone: every allowed zone "
                                "already has a matching pod")
            else:
                zone_sets = [(frozenset(free), count)] if free else []
                if not free:
                    self.reject(cls, count, "pod anti-affinity on zone: every allowed zone has a matching pod")
        out: list[Chunk] = []
        for zones, zone_count in zone_sets:
            parts: list[Chunk] = [(zones, None, zone_count)]
            for constraint in sample.topology_spread:
                if constraint.topology_key not in ZONE_KEYS and constraint.topology_key != CAPACITY_TYPE_LABEL:
                    continue
                if not selects(constraint.label_selector, owner_namespace=namespace, candidate=cls):
                    continue  # its own pods do not count: placing them never changes the skew
                parts = self.spread_parts(cls, constraint, parts, banned)
            out.extend(parts)
        if ZONE_LABEL in topology.pinned.get(cls.id, ()):
            # Others follow (or avoid) this class's zone: decide it now instead of at launch.
            decided: list[Chunk] = []
            for zones, capacity_types, part in out:
                choices = set(zones) & usable if zones else usable
                if zones is not None and len(zones) == 1:
                    decided.append((zones, capacity_types, part))
                elif choices:
                    decided.append((frozenset({topology.cheapest_zone(cls, choices)}), capacity_types, part))
                else:
                    decided.append((zones, capacity_types, part))
            out = decided
        for zones, capacity_types, part in out:  # what later classes' spread and affinity count
            if zones is not None and len(zones) == 1:
                topology.add_to_zone(cls, next(iter(zones)), part)
            if capacity_types is not None and len(capacity_types) == 1:
                topology.add_to_domain(cls, CAPACITY_TYPE_LABEL, next(iter(capacity_types)), part)
        return out

    def spread_parts(self, cls: PodClass, constraint: TopologySpreadConstraint, parts: list[Chunk],
                     banned: set[str]) -> list[Chunk]:
        """Split each part over the domains of a zone or capacity-type spread constraint."""
        is_zone = constraint.topology_key in ZONE_KEYS
        domains, room = self.topology.usable(cls, constraint.topology_key)
        if is_zone:
            domains -= banned
        every = self.topology.spread_every(cls, constraint) | domains
        counts = self.topology.matching_counts(cls, constraint.label_selector, constraint.topology_key,
                                               spread=constraint)
        hard = constraint.when_unsatisfiable == "DoNotSchedule"
        # minDomains: with fewer eligible domains than asked, the global minimum is 0.
        min_zero = hard and constraint.min_domains is not None and len(every) < constraint.min_domains
        new_parts: list[Chunk] = []
        for part_zones, part_types, part_count in parts:
            own = part_zones if is_zone else part_types
            allowed = domains & (own or domains)
            if not allowed:
                self.reject(cls, part_count, f"topology spread on {constraint.topology_key}: no domain it may use "
                            "has room or a NodePool that can launch there")
                continue
            got, over = spread(allowed, every, counts, part_count, max_skew=constraint.max_skew, min_zero=min_zero,
                               room=room)
            if over and not hard:  # ScheduleAnyway: a preference, relaxed once it cannot be met
                extra = water_fill(allowed, {domain: counts.get(domain, 0) + got.get(domain, 0) for domain in allowed},
                                   over, room={domain: left - got.get(domain, 0) for domain, left in room.items()})
                for domain, count in extra.items():
                    got[domain] = got.get(domain, 0) + count
                    over -= count
            if over and hard and self.splitter.relax(cls, over):
                over = 0
            if over:
                self.reject(cls, over, f"topology spread on {constraint.topology_key}: maxSkew {constraint.max_skew} "
                            "would be exceeded in every domain it may use" if hard else
                            f"topology spread on {constraint.topology_key}: no domain it may use has room left")
            for domain, count in sorted(got.items()):
                if count:
                    new_parts.append((frozenset({domain}), part_types, count) if is_zone
                                     else (part_zones, frozenset({domain}), count))
                    counts[domain] = counts.get(domain, 0) + count
                    if domain in room:
                        room[domain] -= count
        return new_parts

    def place(self, cls: PodClass, zones: frozenset[str] | None, capacity_types: frozenset[str] | None,
              count: int) -> None:
        """Place a chunk of a class that shapes nodes: existing nodes, then nodes opened so far, then
        nodes of its own."""
        affinity_nodes = self.hostname_affinity(cls)
        self_affine = affinity_nodes is not None and all(
            selects(term, owner_namespace=cls.sample.namespace, candidate=cls) for term in cls.sample.pod_affinity
            if term.topology_key == HOSTNAME_LABEL)
        candidates = self.existing if affinity_nodes is None else [
            node for node in affinity_nodes if isinstance(node, ExistingNode)]
        count = self.place_existing(cls, zones, capacity_types, count, candidates)
        if count == 0:
            return
        opened = self.opened.open if affinity_nodes is None else [
            node for node in affinity_nodes if isinstance(node, NewNode)]
        cpu_request, memory_request = cls.request[0], cls.request[1]  # cpu and memory come first in the keys
        for node in opened:
            if count == 0:
                return
            free = node.free
            if free[0] < cpu_request or free[1] < memory_request or free[2] < 1:  # checked without a call
                continue
            taken = node.can_add(cls, zones, capacity_types, count)
            if taken > 0:
                self.opened.put(node, cls, taken)
                count -= taken
        if count == 0:
            return
        if affinity_nodes:
            self.reject(cls, count, "pod affinity on hostname: the node with matching pods is full")
            return
        if affinity_nodes is not None and not self_affine:
            self.reject(cls, count, "pod affinity on hostname: no pod matches its required podAffinity")
            return
        if affinity_nodes is not None or cls.shapes_nodes or cls.id in self.topology.host_targets:
            self.open_nodes(cls, zones, capacity_types, count, single=affinity_nodes is not None)
            return
        self.defer(cls, zones, capacity_types, count)

    def place_existing(self, cls: PodClass, zones: frozenset[str] | None, capacity_types: frozenset[str] | None,
                       count: int, candidates: list[ExistingNode] | None = None) -> int:
        """Put what fits on existing nodes and in-flight instances; returns how many are left."""
        full: set[int] = set()  # ids of nodes found without room for any class
        for node in self.roomy if candidates is None else candidates:
            if count == 0:
                break
            if (zones is not None and not node.zones & zones) or (
                    capacity_types is not None and not node.capacity_types & capacity_types):
                continue
            taken = min(count, fit_count(node.free, cls.request))  # the cheapest test first: most nodes are full
            if taken <= 0:
                if self.least is not None and fit_count(node.free, self.least) == 0:
                    full.add(id(node))
                continue
            if not node.admits(cls, cls.variant) or node.conflicts_with(cls):
                continue
            taken = min(taken, node.room_for(cls))
            if taken > 0:
                node.add(cls, taken)
                count -= taken
        if full:  # walking every existing node for every chunk was chunks x nodes
            self.roomy = [node for node in self.roomy if id(node) not in full]
        return count

    def hostname_affinity(self, cls: PodClass) -> list[ExistingNode | NewNode] | None:
        """Nodes that already hold pods a hostname podAffinity term selects; None when unconstrained."""
        terms = [term for term in cls.sample.pod_affinity if term.topology_key == HOSTNAME_LABEL]
        if not terms:
            return None
        namespace = cls.sample.namespace
        found: list[ExistingNode | NewNode] = []
        nodes: list[ExistingNode | NewNode] = [*self.existing, *self.opened.every]
        for node in nodes:
            bound = node.bound if isinstance(node, ExistingNode) else ()
            if all(any(selects(term, owner_namespace=namespace, candidate=pod) for pod in bound)
                   or any(selects(term, owner_namespace=namespace, candidate=self.classes[other])
                          for other in node.classes)
                   for term in terms):
                found.append(node)
        return found

    def defer(self, cls: PodClass, zones: frozenset[str] | None, capacity_types: frozenset[str] | None,
              count: int) -> None:
        """Queue pods for bulk packing on the first NodePool target that can hold them."""
        for target in cls.targets:
            usable_zones = target.zones if zones is None else target.zones & zones
            usable_types = target.capacity_types if capacity_types is None else target.capacity_types & capacity_types
            if usable_zones and usable_types:
                self.packer.add(target, usable_zones, usable_types, cls, count)
                return
        self.reject(cls, count, self.why_not(cls, zones))

    @staticmethod
    def why_not(pod_class: PodClass, zones: frozenset[str] | None) -> str:
        if not pod_class.targets:
            return "no existing node has room and no NodePool can launch a node for it"
        return f"no NodePool offers an instance type in zone(s) {sorted(zones or ())}"

    def reject(self, cls: PodClass, count: int, reason: str) -> None:
        cls.reject(count, reason, self.plan.unschedulable)

    def open_nodes(self, cls: PodClass, zones: frozenset[str] | None, capacity_types: frozenset[str] | None,
                   count: int, *, single: bool) -> None:
        """New nodes for a class that shapes them (a per-node cap, conflicts, or hostname affinity)."""
        reason = ""
        for target in cls.targets:
            usable_zones = target.zones if zones is None else target.zones & zones
            usable_types = target.capacity_types if capacity_types is None else target.capacity_types & capacity_types
            if not usable_zones or not usable_types:
                continue
            types = [pool_type for pool_type in (target.types if target.sizing is None else target.sizing)
                     if pool_type.sizing_price(usable_zones, usable_types) < INFINITE_PRICE]
            if not types:
                continue
            per_node = count if single else min(cls.cap, count)
            share, prices = self.share(cls, target)
            want = plus(share, cls.request, per_node)
            fitting = [pool_type for pool_type in types if fit_count(pool_type.allocatable, cls.request) >= per_node]
            if fitting:
                # The node's price plus what the part of its share it cannot hold costs when packed in
                # bulk (at the LP's shadow prices): small efficient nodes win when the bulk is cheap,
                # and a node is never bought larger than the pods that will fill it.
                chosen = min(fitting, key=lambda pool_type: (pool_type.sizing_price(usable_zones, usable_types) + sum(
                    price * max(0, wanted - room) for price, wanted, room
                    in zip(prices, want, pool_type.allocatable, strict=True)), pool_type.name))
            else:
                chosen = min(types, key=lambda pool_type: pool_type.sizing_price(usable_zones, usable_types) / max(
                    min(fit_count(pool_type.allocatable, cls.request), per_node), 1e-9))
            while count > 0:
                taken = min(per_node, count, fit_count(chosen.allocatable, cls.request))
                if taken <= 0:
                    break
                node = self.opened.open_node(target, chosen, usable_zones, usable_types)
                if node is None:
                    reason = Rejection(target.pool.name, Criterion.LIMIT_REACHED_ON,
                                       (target.pool.exceeded_limit(chosen),)).render()
                    break
                self.opened.put(node, cls, taken)
                count -= taken
                if single:
                    break
            if count == 0:
                return
            if single:
                self.reject(cls, count, "pod affinity on hostname: its pods do not all fit on one node")
                return
        self.reject(cls, count, reason or self.why_not(cls, zones))

    def share(self, cls: PodClass, target: Target) -> tuple[Vec, tuple[float, ...]]:
        """What each node opened for a shaped class should also hold: the rest of the NodePool's pending
        demand divided by the number of nodes its largest shaped family needs (a family is a class and
        the classes it may not share a node with), so the other pods fill those nodes instead of new ones;
        and the NodePool's shadow prices."""
        view = target.pool
        if view.index in self.shares:
            return self.shares[view.index]
        in_pool = [other for other in self.classes
                   if other.error is None and other.targets and other.targets[0].pool is view]
        dimensions = range(len(self.keys))
        total = [sum(other.request[index] * len(other.pods) for other in in_pool) for index in dimensions]
        nodes, family_demand = 1, [0] * len(self.keys)
        by_id = {other.id: other for other in in_pool}
        for shaped in in_pool:
            if not shaped.shapes_nodes:
                continue
            # in class order (``in_pool``'s), from the ids its family names rather than a walk over the pool
            members = {shaped.id, *shaped.conflicts}.union(*(ids for _, ids, _constraint in shaped.host_spread))
            family = [by_id[member] for member in sorted(members) if member in by_id]
            need = math.ceil(sum(len(other.pods) for other in family) / max(shaped.cap, 1))
            if need > nodes:
                nodes = need
                family_demand = [sum(other.request[index] * len(other.pods) for other in family)
                                 for index in dimensions]
        share = tuple(max(0, (whole - family)) // nodes for whole, family in zip(total, family_demand, strict=True))
        types = [pool_type for pool_type in view.types
                 if pool_type.sizing_price(view.zones, view.capacity_types) < INFINITE_PRICE]
        prices = duals(types, [(other, len(other.pods)) for other in in_pool] or [(cls, len(cls.pods))], total,
                       zones=view.zones, capacity_types=view.capacity_types, keys=self.keys)
        self.shares[view.index] = (share, prices)
        return share, prices
