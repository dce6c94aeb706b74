"""A target: one requirement variant of a pod class on one NodePool, that is what a new node for the
class may be (its instance types, zones, capacity types and the labels it gets)."""

from __future__ import annotations

from dataclasses import dataclass

from autoscaler.domain.scheduling.node_pool_view import NodePoolView
from autoscaler.domain.scheduling.pool_type import PoolType


@dataclass(eq=False, slots=True)
class Target:
    pool: NodePoolView
    types: list[PoolType]
    zones: frozenset[str]
    capacity_types: frozenset[str]
    labels: dict[str, str]
    # Targets that allow the same nodes share a signature: their classes are packed together.
    signature: tuple[object, ...]
    names: frozenset[str] | None = None  # the names of ``types``, made when first asked
    sizing: list[PoolType] | None = None  # with minValues: the types nodes are filled up to
    base_types: list[PoolType] | None = None  # ``types`` before narrowing to what one class's pods fit

    def type_names(self) -> frozenset[str]:
        if self.names is None:
            self.names = frozenset(pool_type.name for pool_type in self.types)
        return self.names
