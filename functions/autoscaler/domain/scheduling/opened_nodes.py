"""The new nodes a plan opens: every one (for the output) and those that may still take pods, opened
within the NodePools' limits, and filled from pods still to place balancing CPU against memory (the chunks
to fill from kept on a ``ChunkShelf``)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from autoscaler.domain import resources as res
from autoscaler.domain.scheduling.new_node import NewNode
from autoscaler.domain.scheduling.pod_class import PodChunk, PodClass
from autoscaler.domain.scheduling.pool_type import PoolType
from autoscaler.domain.scheduling.target import Target
from autoscaler.domain.scheduling.vector import fit_count


class OpenedNodes:
    def __init__(self, keys: Sequence[str]) -> None:
        self.keys = keys
        self.open: list[NewNode] = []  # new nodes that may still take pods
        self.every: list[NewNode] = []  # every new node, for the output
        # ``keep_useful``: the floor of its last call (every open node had room for it then), and the nodes
        # opened or given pods (``put``) since, the only ones a floor no higher can drop
        self.floor: Sequence[int] | None = None
        self.changed: list[NewNode] = []

    def open_node(self, target: Target, pool_type: PoolType, zones: frozenset[str],
                  capacity_types: frozenset[str]) -> NewNode | None:
        """A new empty node of ``pool_type`` for ``target``; None when the NodePool's limits forbid it."""
        if not target.pool.take(pool_type):
            return None
        node = NewNode(target, pool_type, dict(target.labels), target.pool.pool.taints, pool_type.allocatable,
                       tuple(0 for _ in self.keys), zones, capacity_types)
        self.open.append(node)
        self.every.append(node)
        self.changed.append(node)
        return node

    def put(self, node: NewNode, cls: PodClass, count: int) -> None:
        """Put ``count`` pods of ``cls`` on ``node`` (``NewNode.add``) while classes are being placed."""
        node.add(cls, count)
        self.changed.append(node)

    def keep_useful(self, floor: Sequence[int]) -> None:
        """Drop from the open nodes those without room for ``floor`` (the smallest remaining request), so
        scans stay short. When no part of ``floor`` is higher than last time, only the nodes opened or
        given pods since can lack room for it: checking every node on every call was nodes x classes."""
        last = self.floor
        if last is not None and all(new <= old for new, old in zip(floor, last, strict=True)):
            failing = {id(node) for node in self.changed if fit_count(node.free, floor) == 0}
            if failing:
                self.open = [node for node in self.open if id(node) not in failing]
        else:
            self.open = [node for node in self.open if fit_count(node.free, floor) > 0]
        self.floor = floor
        self.changed = []

    def fill(self, chunks: list[PodChunk]) -> None:
        """Fill the nodes opened so far from ``chunks`` (their ``left`` decremented in place): per node,
        take from the CPU-heavy end when memory is the fuller dimension and from the memory-heavy end
        otherwise, in small chunks, as ``node_mix.fill_balanced`` does."""
        cpu, memory = self.keys.index(res.CPU), self.keys.index(res.MEMORY)
        live = sorted(chunks, key=lambda chunk: (chunk.cls.request[memory] / max(chunk.cls.request[cpu], 1),
                                                 chunk.cls.id))
        shelf = ChunkShelf(live, cpu, memory)
        for node in self.open:
            if not shelf.remaining:
                return
            low, high = 0, len(live) - 1
            cpu_limit, memory_limit = max(node.limit[cpu], 1), max(node.limit[memory], 1)
            while low <= high:
                free = node.free
                if free[2] < 1:  # no pod fits: the rest of the walk would take nothing
                    break
                # A step that takes nothing leaves ``free`` and so the side alone: the walk goes on from that
                # side's next chunk that may fit, skipping those that cannot (and those with no pods left).
                take_low = free[cpu] / cpu_limit >= free[memory] / memory_limit
                if take_low:
                    low = position = shelf.next_fit(low, high, free[cpu], free[memory], node.zones)
                else:
                    high = position = shelf.previous_fit(high, low, free[cpu], free[memory], node.zones)
                if low > high:
                    break
                chunk = live[position]
                cls, left = chunk.cls, chunk.left
                want = min(left, max(1, fit_count(node.limit, cls.request) // 16))
                taken = node.can_add(cls, chunk.zones, chunk.capacity_types, want)
                if taken > 0:
                    node.add(cls, taken)
                    chunk.left = left - taken
                    if chunk.left == 0:
                        shelf.emptied(position)
                if taken <= 0 or chunk.left == 0:
                    if take_low:
                        low += 1
                    else:
                        high -= 1


class ChunkShelf:
    """The chunks ``OpenedNodes.fill`` walks, in its order, with the least CPU and memory request and the
    zones per block of chunks that still have pods, so that a node's walk jumps over the blocks none of
    which fits it (a chunk limited to zones the node is not in never goes there: ``NewNode.can_add``).
    Walking every chunk for every node was nodes x chunks: 4,000 nodes opened for hostname anti-affinity
    times 2,400 chunks at 20,000 pods of Karpenter's mix."""

    BLOCK = 32

    def __init__(self, chunks: list[PodChunk], cpu: int, memory: int) -> None:
        self.chunks, self.cpu, self.memory = chunks, cpu, memory
        self.remaining = sum(1 for chunk in chunks if chunk.left)  # chunks with pods left
        # per block: least CPU, least memory, and the zones its chunks may go to (None: any)
        self.least = [self._least(start) for start in range(0, len(chunks), self.BLOCK)]

    def _least(self, start: int) -> tuple[float, float, frozenset[str] | None]:
        cpu_least, memory_least = math.inf, math.inf
        zones: set[str] | None = set()
        for chunk in self.chunks[start:start + self.BLOCK]:
            if chunk.left:
                cpu_least = min(cpu_least, chunk.cls.request[self.cpu])
                memory_least = min(memory_least, chunk.cls.request[self.memory])
                if chunk.zones is None:
                    zones = None
                elif zones is not None:
                    zones |= chunk.zones
        return cpu_least, memory_least, None if zones is None else frozenset(zones)

    def emptied(self, position: int) -> None:
        """The chunk at ``position`` has no pods left."""
        self.remaining -= 1
        block = position // self.BLOCK
        self.least[block] = self._least(block * self.BLOCK)

    def _fits(self, position: int, free_cpu: int, free_memory: int, zones: frozenset[str]) -> bool:
        chunk = self.chunks[position]
        request = chunk.cls.request
        return (bool(chunk.left) and request[self.cpu] <= free_cpu and request[self.memory] <= free_memory
                and (chunk.zones is None or not chunk.zones.isdisjoint(zones)))

    def _block_may_fit(self, block: int, free_cpu: int, free_memory: int, zones: frozenset[str]) -> bool:
        cpu_least, memory_least, block_zones = self.least[block]
        return (cpu_least <= free_cpu and memory_least <= free_memory
                and (block_zones is None or not block_zones.isdisjoint(zones)))

    def next_fit(self, low: int, high: int, free_cpu: int, free_memory: int, zones: frozenset[str]) -> int:
        """The first position in ``low..high`` whose chunk has pods left, fits the free CPU and memory and
        may go to one of ``zones``; ``high + 1`` when none does."""
        position = low
        while position <= high:
            block = position // self.BLOCK
            end = min((block + 1) * self.BLOCK, high + 1)
            if self._block_may_fit(block, free_cpu, free_memory, zones):
                for candidate in range(position, end):
                    if self._fits(candidate, free_cpu, free_memory, zones):
                        return candidate
            position = end
        return high + 1

    def previous_fit(self, high: int, low: int, free_cpu: int, free_memory: int, zones: frozenset[str]) -> int:
        """The last position in ``low..high`` as ``next_fit`` would take it; ``low - 1`` when none is."""
        position = high
        while position >= low:
            block = position // self.BLOCK
            start = max(block * self.BLOCK, low)
            if self._block_may_fit(block, free_cpu, free_memory, zones):
                for candidate in range(position, start - 1, -1):
                    if self._fits(candidate, free_cpu, free_memory, zones):
                        return candidate
            position = start - 1
        return low - 1
