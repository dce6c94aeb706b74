"""Packing in bulk: pods deferred per (NodePool target, zones, capacity types) group are sized onto new
nodes with a small LP over at most two instance types, each node taking a proportional share of every
class, so node shapes follow the group's CPU:memory mix. The last fraction of a node goes on the type
with the lowest price per unit of pods it actually takes. What a NodePool's limit leaves over moves to
the class's next target, or is reported."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from autoscaler.domain import resources as res
from autoscaler.domain.scheduling.instance_type_index import InstanceTypeIndex
from autoscaler.domain.scheduling.node_mix import Demand, fill_balanced, mix, mix_duals
from autoscaler.domain.scheduling.opened_nodes import OpenedNodes
from autoscaler.domain.scheduling.pod_class import PodChunk, PodClass
from autoscaler.domain.scheduling.pool_type import INFINITE_PRICE, PoolType
from autoscaler.domain.scheduling.rejection import Criterion, Rejection
from autoscaler.domain.scheduling.target import Target
from autoscaler.domain.scheduling.vector import Vec, fit_count, fits_within

RESIDUAL_TIE = 0.005  # price-per-value margin within which the residual node that holds more wins

GroupKey = tuple[tuple[object, ...], frozenset[str], frozenset[str]]  # (target signature, zones, capacity types)
Late = list[tuple[PodClass, int, str]]  # pods reported once everything else is placed, and why


class GroupPacker:
    def __init__(self, keys: Sequence[str], index: InstanceTypeIndex, opened: OpenedNodes) -> None:
        self.keys = keys
        self.index = index
        self.opened = opened
        self.groups: dict[GroupKey, tuple[Target, frozenset[str], frozenset[str], list[tuple[PodClass, int]]]] = {}

    def add(self, target: Target, zones: frozenset[str], capacity_types: frozenset[str], cls: PodClass,
            count: int) -> None:
        """Defer ``count`` pods of ``cls`` to the group of ``target`` in ``zones`` and ``capacity_types``."""
        key = (target.signature, zones, capacity_types)
        group = self.groups.get(key)
        if group is None:
            # The group's nodes may be any type the target allows, not only those this class fits.
            whole = target if target.base_types is None else replace(target, types=target.base_types, sizing=None)
            group = self.groups[key] = (whole, zones, capacity_types, [])
        group[3].append((cls, count))

    def pack_all(self) -> Late:
        """Pack every group, NodePools in order; returns the pods no target could take, with the reason."""
        late: Late = []
        while self.groups:
            key = min(self.groups, key=lambda group: self.groups[group][0].pool.index)
            target, zones, capacity_types, items = self.groups.pop(key)
            for cls, count in self.pack(target, zones, capacity_types, list(items)):
                # Classes share a group by target signature; each has its own target objects.
                position = next((number for number, own in enumerate(cls.targets)
                                 if own.signature == target.signature), len(cls.targets))
                following = next((own for own in cls.targets[position + 1:]
                                  if own.zones & zones and own.capacity_types & capacity_types), None)
                if following is None:
                    late.append((cls, count, Rejection(target.pool.name, Criterion.LIMIT_REACHED).render()))
                else:
                    self.add(following, zones & following.zones, capacity_types & following.capacity_types, cls,
                             count)
        return late

    def pack(self, target: Target, zones: frozenset[str], capacity_types: frozenset[str],
             items: Demand) -> Demand:
        """Open nodes for ``items`` on ``target``; returns what a NodePool limit left over.

        Node by node: solve the two-type LP on the demand still to place, open the type the LP uses
        most (or, for the last fraction of a node, ``residual_node``'s choice), and fill it balancing
        CPU against memory so the node is full in both."""
        types = [pool_type for pool_type in target.types
                 if pool_type.sizing_price(zones, capacity_types) < INFINITE_PRICE]
        sizing = self.index.min_values_sizing(target, types)
        if sizing is not None:
            types = sizing
        split = self.demanding(types, items, zones=zones, capacity_types=capacity_types)
        if split is not None:
            # Pods only the largest types hold get their nodes first; the rest top those up, and what is
            # left is packed on its own (small types stay allowed for it).
            big, rest = split
            left = self.pack(target, zones, capacity_types, big)
            chunks = [PodChunk(cls, zones, capacity_types, count) for cls, count in rest]
            self.opened.fill(chunks)
            rest = [(chunk.cls, chunk.left) for chunk in chunks if chunk.left]
            return left + (self.pack(target, zones, capacity_types, rest) if rest else [])
        # Only types that hold every class's pod are sized with (as the LP would each round anyway).
        biggest = tuple(max(cls.request[index] for cls, _ in items) for index in range(len(self.keys)))
        types = [pool_type for pool_type in types if fits_within(biggest, pool_type.allocatable)] or types
        remaining = {cls.id: count for cls, count in items}
        by_id = {cls.id: cls for cls, _ in items}
        cpu, memory = self.keys.index(res.CPU), self.keys.index(res.MEMORY)
        while types and any(remaining.values()):
            live = [(by_id[class_id], count) for class_id, count in remaining.items() if count > 0]
            demand = [0] * len(self.keys)
            for cls, count in live:
                for index, amount in enumerate(cls.request):
                    demand[index] += amount * count
            first, first_count, second, second_count = mix(types, live, demand, zones=zones,
                                                           capacity_types=capacity_types, keys=self.keys)
            if first is None:
                break
            if first_count >= 1 or (second is not None and second_count >= 1):
                chosen = first if first_count >= second_count or second is None else second
                put, used = fill_balanced(chosen, live, cpu=cpu, memory=memory)
            else:
                prices = mix_duals(first, second, demand, zones=zones, capacity_types=capacity_types, keys=self.keys)
                chosen, put, used = self.residual_node(target, types, live, demand, prices, zones=zones,
                                                       capacity_types=capacity_types)
            if not put:
                break  # the largest remaining class does not fit this type; handled below
            node = self.opened.open_node(target, chosen, zones, capacity_types)
            if node is None:
                break
            node.fill(put, used)
            for class_id, count in put.items():
                remaining[class_id] -= count
                by_id[class_id].placed += count
        # Anything the mix could not place (a class too big for the chosen type, or a limit) goes one
        # class at a time onto its own cheapest type, then is handed back.
        leftovers = []
        for class_id, count in remaining.items():
            cls, unplaced = by_id[class_id], count
            while unplaced > 0:
                fits = [pool_type for pool_type in types if fit_count(pool_type.allocatable, cls.request) >= 1]
                if not fits:
                    break
                chosen = min(fits, key=lambda pool_type: pool_type.sizing_price(zones, capacity_types) / min(
                    fit_count(pool_type.allocatable, cls.request), unplaced))
                taken = min(unplaced, fit_count(chosen.allocatable, cls.request))
                node = self.opened.open_node(target, chosen, zones, capacity_types)
                if node is None:
                    break
                node.add(cls, taken)
                unplaced -= taken
            if unplaced > 0:
                leftovers.append((cls, unplaced))
        return leftovers

    def demanding(self, types: list[PoolType], items: Demand, *, zones: frozenset[str],
                  capacity_types: frozenset[str]) -> tuple[Demand, Demand] | None:
        """The classes that fit far fewer types than the others (an 8-GPU pod next to 1-GPU pods) and the
        rest, when packing them apart is clearly cheaper: the LP over all of them may only use types the
        most demanding class fits."""
        if len(items) < 2:
            return None
        if all(cls.request == items[0][0].request for cls, _ in items):
            return None
        by_request: dict[tuple[int, ...], int] = {}  # classes of one request fit the same types: counted once
        for cls, _ in items:
            if cls.request not in by_request:
                by_request[cls.request] = sum(1 for pool_type in types
                                              if fits_within(cls.request, pool_type.allocatable))
        fitting = {cls.id: by_request[cls.request] for cls, _ in items}
        fewest = min(fitting.values())
        big = [(cls, count) for cls, count in items if fitting[cls.id] == fewest]
        rest = [(cls, count) for cls, count in items if fitting[cls.id] > fewest]
        if not rest or min(fitting[cls.id] for cls, _ in rest) < 2 * max(fewest, 1):
            return None

        def cost(part: Demand) -> float:
            demand = [sum(cls.request[index] * count for cls, count in part) for index in range(len(self.keys))]
            first, first_count, second, second_count = mix(types, part, demand, zones=zones,
                                                           capacity_types=capacity_types, keys=self.keys)
            if first is None:
                return INFINITE_PRICE
            return first.sizing_price(zones, capacity_types) * first_count + (
                second.sizing_price(zones, capacity_types) * second_count if second is not None else 0.0)

        return (big, rest) if cost(big) + cost(rest) < 0.97 * cost(items) else None

    def residual_node(self, target: Target, types: list[PoolType], live: Demand, demand: list[int],
                      prices: tuple[float, ...], *, zones: frozenset[str],
                      capacity_types: frozenset[str]) -> tuple[PoolType, dict[int, int], Vec]:
        """The node for a group's last fraction of a node: of the types that are not beaten on price and
        size, the one whose price per unit of pods it actually takes (valued at the group's shadow
        ``prices``) is lowest; the cheapest type that takes everything competes on the same terms,
        so one roomy node loses to a well-filled smaller one plus what remains."""
        cpu, memory = self.keys.index(res.CPU), self.keys.index(res.MEMORY)
        best: tuple[float, PoolType, dict[int, int], Vec] | None = None
        for price, pool_type in self.index.frontier(target, types, zones, capacity_types):
            put, used = fill_balanced(pool_type, live, cpu=cpu, memory=memory)
            if not put:
                continue
            value = sum(unit * amount for unit, amount in zip(prices, used, strict=True))
            ratio = price / value if value > 0 else INFINITE_PRICE
            # Within RESIDUAL_TIE, the type that takes more wins: one node rather than two at the same price.
            holds_more = best is not None and fits_within(best[3], used) and best[3] != used
            if best is None or ratio < best[0] * (1 - RESIDUAL_TIE) or (
                    holds_more and ratio <= best[0] * (1 + RESIDUAL_TIE)):
                best = (ratio, pool_type, put, used)
            if fits_within(demand, pool_type.allocatable):
                break  # larger types only cost more for the same pods
        if best is None:
            chosen = types[0]
            return chosen, *fill_balanced(chosen, live, cpu=cpu, memory=memory)
        return best[1], best[2], best[3]
