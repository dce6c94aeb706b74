"""The new nodes a plan opens: every one (for the output) and those that may still take pods, opened
within the NodePools' limits, and filled from pods still to place balancing CPU against memory."""

from __future__ import annotations

from collections.abc import Sequence

from autoscaler.domain import resources as res
from autoscaler.domain.scheduling.new_node import NewNode
from autoscaler.domain.scheduling.pod_class import PodChunk
from autoscaler.domain.scheduling.pool_type import PoolType
from autoscaler.domain.scheduling.target import Target
from autoscaler.domain.scheduling.vector import fit_count


class OpenedNodes:
    def __init__(self, keys: Sequence[str]) -> None:
        self.keys = keys
        self.open: list[NewNode] = []  # new nodes that may still take pods
        self.every: list[NewNode] = []  # every new node, for the output

    def open_node(self, target: Target, pool_type: PoolType, zones: frozenset[str],
                  capacity_types: frozenset[str]) -> NewNode | None:
        """A new empty node of ``pool_type`` for ``target``; None when the NodePool's limits forbid it."""
        if not target.pool.take(pool_type):
            return None
        node = NewNode(target, pool_type, dict(target.labels), target.pool.pool.taints, pool_type.allocatable,
                       tuple(0 for _ in self.keys), zones, capacity_types)
        self.open.append(node)
        self.every.append(node)
        return node

    def keep_useful(self, floor: Sequence[int]) -> None:
        """Drop from the open nodes those without room for ``floor`` (the smallest remaining request), so
        scans stay short."""
        self.open = [node for node in self.open if fit_count(node.free, floor) > 0]

    def fill(self, chunks: list[PodChunk]) -> None:
        """Fill the nodes opened so far from ``chunks`` (their ``left`` decremented in place): per node,
        take from the CPU-heavy end when memory is the fuller dimension and from the memory-heavy end
        otherwise, in small chunks, as ``node_mix.fill_balanced`` does."""
        cpu, memory = self.keys.index(res.CPU), self.keys.index(res.MEMORY)
        live = sorted(chunks, key=lambda chunk: (chunk.cls.request[memory] / max(chunk.cls.request[cpu], 1),
                                                 chunk.cls.id))
        for node in self.open:
            live = [chunk for chunk in live if chunk.left]
            if not live:
                return
            low, high = 0, len(live) - 1
            cpu_limit, memory_limit = max(node.limit[cpu], 1), max(node.limit[memory], 1)
            while low <= high:
                free = node.free
                take_low = free[cpu] / cpu_limit >= free[memory] / memory_limit
                chunk = live[low] if take_low else live[high]
                cls, left = chunk.cls, chunk.left
                taken = 0
                if left and free[cpu] >= cls.request[cpu] and free[memory] >= cls.request[memory] and free[2] >= 1:
                    want = min(left, max(1, fit_count(node.limit, cls.request) // 16))
                    taken = node.can_add(cls, chunk.zones, chunk.capacity_types, want)
                if taken > 0:
                    node.add(cls, taken)
                    chunk.left = left - taken
                if taken <= 0 or chunk.left == 0:
                    if take_low:
                        low += 1
                    else:
                        high -= 1
