"""An instance type as one NodePool offers it: its labels, allocatable less the DaemonSet overhead that
lands on such a node, capacity, and the priced offerings (zone, capacity type) the NodePool may use."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from autoscaler.domain.scheduling.vector import Vec

INFINITE_PRICE = float("inf")


@dataclass(eq=False, slots=True)
class PoolType:
    name: str
    labels: dict[str, str]
    allocatable: Vec  # allocatable minus DaemonSet overhead on this NodePool
    capacity: dict[str, int]
    offerings: dict[tuple[str, str], float]  # (zone, capacity type) -> price
    overhead: dict[str, int] = field(default_factory=dict)  # the DaemonSet requests taken out of ``allocatable``
    # (zone, capacity type) -> allocatable less the DaemonSets that land on a node of that offering
    allocatable_by_offering: dict[tuple[str, str], Vec] = field(default_factory=dict)
    # (zones, capacity types) -> sizing price: asked ~10^5 times per plan for a few dozen distinct keys
    sizing_prices: dict[tuple[frozenset[str], frozenset[str]], float] = field(default_factory=dict)
    # (zones, capacity type) -> ``allocatable_on``: asked for every type a launch walks, for a few distinct keys
    allocatable_by_zones: dict[tuple[frozenset[str], str], Vec] = field(default_factory=dict)

    def allocatable_on(self, zones: frozenset[str], capacity_type: str) -> Vec:
        """Its allocatable on a node of ``capacity_type`` in one of ``zones``: what each such offering of it
        leaves beside the DaemonSets landing there, the least of them (``allocatable`` when unknown)."""
        if not self.overhead:
            return self.allocatable  # no DaemonSet may land: nothing to be exact about
        key = (zones, capacity_type)
        room = self.allocatable_by_zones.get(key)
        if room is None:
            room = self.allocatable_by_zones[key] = self._allocatable_on(zones, capacity_type)
        return room

    def _allocatable_on(self, zones: frozenset[str], capacity_type: str) -> Vec:
        exact = [self.allocatable_by_offering.get((zone, capacity_type)) for zone in zones
                 if (zone, capacity_type) in self.offerings]
        if not exact or any(room is None for room in exact):
            return self.allocatable
        return tuple(min(values) for values in zip(*exact, strict=True))

    def price(self, zones: Iterable[str], capacity_type: str) -> float:
        """The lowest price of its offerings of ``capacity_type`` in ``zones`` (infinite when none)."""
        best = INFINITE_PRICE
        for zone in zones:
            offered = self.offerings.get((zone, capacity_type))
            if offered is not None and offered < best:
                best = offered
        return best

    def sizing_price(self, zones: frozenset[str], capacity_types: frozenset[str]) -> float:
        """Price used to size nodes: spot when allowed and offered, else on-demand (what launch will pick)."""
        key = (zones, capacity_types)
        price = self.sizing_prices.get(key)
        if price is None:
            price = self.sizing_prices[key] = self._sizing_price(zones, capacity_types)
        return price

    def _sizing_price(self, zones: frozenset[str], capacity_types: frozenset[str]) -> float:
        if "spot" in capacity_types:
            spot = self.price(zones, "spot")
            if spot < INFINITE_PRICE:
                return spot
        return self.price(zones, "on-demand") if "on-demand" in capacity_types else INFINITE_PRICE
