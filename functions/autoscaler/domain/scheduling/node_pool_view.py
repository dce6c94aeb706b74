"""A dynamic NodePool as one plan sees it: the instance types it may launch (``PoolType``), the zones and
capacity types they are offered in, its requirements on custom keys, the host ports its DaemonSets take,
and its usage against ``limits`` as this plan launches nodes."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from autoscaler.domain import resources as res
from autoscaler.domain.allocatable import capacity
from autoscaler.domain.models import HostPort, Requirement
from autoscaler.domain.nodepool import NodePool
from autoscaler.domain.plan import PlanInput
from autoscaler.domain.scheduling.pool_type import PoolType
from autoscaler.domain.scheduling.prepared import PoolTable, ami_family_of, kubelet_of, pool_table


@dataclass(eq=False, slots=True)
class NodePoolView:
    pool: NodePool
    node_class: str
    types: list[PoolType]
    zones: frozenset[str]
    capacity_types: frozenset[str]
    custom: dict[str, list[Requirement]]  # requirements on keys that are not well-known
    usage: dict[str, int]
    index: int  # its place in the order NodePools are tried (weight, then name)
    daemon_ports: dict[HostPort, str] = field(default_factory=dict)  # host port -> the DaemonSet holding it

    @property
    def name(self) -> str:
        return self.pool.name

    def within_limits(self, pool_type: PoolType) -> bool:
        """Whether one more node of ``pool_type`` keeps the NodePool within its limits."""
        return all(self.usage.get(key, 0) + pool_type.capacity.get(key, 0) <= limit
                   for key, limit in self.pool.limits.items())

    def exceeded_limit(self, pool_type: PoolType) -> str:
        """The first limit one more node of ``pool_type`` would exceed ("nodes" when none does)."""
        for key, limit in self.pool.limits.items():
            if self.usage.get(key, 0) + pool_type.capacity.get(key, 0) > limit:
                return key
        return "nodes"

    def take(self, pool_type: PoolType) -> bool:
        """Count one more node of ``pool_type`` against the limits; False (nothing counted) when it
        would exceed one."""
        if not self.pool.limits:
            return True
        if not self.within_limits(pool_type):
            return False
        self.usage = res.add(self.usage, {key: pool_type.capacity.get(key, 0) for key in self.pool.limits})
        return True


def node_pool_views(snap: PlanInput, unavailable: Collection[tuple[str, str, str]], keys: tuple[str, ...], *,
                    previous: PoolTable | None = None) -> list[NodePoolView]:
    """A view of every dynamic NodePool for one plan (from ``previous`` when it was made from equal inputs)."""
    table = pool_table(snap, unavailable, keys, previous=previous)
    return [NodePoolView(part.pool, part.pool.node_class_ref, list(part.types), part.zones, part.capacity_types,
                         dict(part.custom), _usage(snap, part.pool), index, dict(part.daemon_ports))
            for index, part in enumerate(table.parts)]


def _usage(snap: PlanInput, pool: NodePool) -> dict[str, int]:
    """What the NodePool's nodes and in-flight instances count against its limits."""
    usage: dict[str, int] = {}
    if not pool.limits:
        return usage
    for node in snap.nodes:
        if node.node_pool == pool.name and not node.deleting:
            usage = res.add(usage, {**node.capacity, "nodes": 1})
    types = {instance_type.name: instance_type for instance_type in snap.instance_types}
    kubelet, root = kubelet_of(pool, snap.node_classes)
    for flight in snap.in_flight:
        if flight.node_pool != pool.name:
            continue
        # The largest capacity EC2 may have given it (a launch whose answer is unknown): never over the limit.
        capacities = [capacity(instance_type, kubelet=kubelet, root_volume_bytes=root,
                               ami_family=ami_family_of(pool, snap.node_classes))
                      for name in (flight.instance_type, *flight.may_be)
                      if (instance_type := types.get(name)) is not None]
        if capacities:
            most = {key: max(each.get(key, 0) for each in capacities) for each in capacities for key in each}
            usage = res.add(usage, {**most, "nodes": 1})
    return usage
