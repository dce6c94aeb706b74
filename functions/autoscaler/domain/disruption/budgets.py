"""Disruption budgets per NodePool and reason (``nodes`` as a count or percentage, optional cron window):
how many of a pool's nodes may be disrupting at once."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping

from autoscaler.domain.cron import window_open
from autoscaler.domain.disruption.model import Reason, in_progress
from autoscaler.domain.models import Node
from autoscaler.domain.nodepool import Budget, NodePool

# --- budgets -----------------------------------------------------------------------------------------

def budget_active(budget: Budget, now: float) -> bool:
    if budget.schedule is None or budget.duration is None:
        return True
    return window_open(budget.schedule, budget.duration, now)


def allowed_disruptions(pool: NodePool, reason: Reason, *, node_count: int, now: float) -> int:
    """How many of the pool's ``node_count`` nodes may be disrupting at once for ``reason``: the
    minimum over the budgets active now that apply to it (percentages round up, as Karpenter does).
    A pool whose budgets are all inactive or for other reasons is not limited."""
    limits = []
    for b in pool.disruption.budgets:
        if b.reasons is not None and reason not in b.reasons:
            continue
        if not budget_active(b, now):
            continue
        limits.append(b.nodes if isinstance(b.nodes, int) else math.ceil(int(b.nodes[:-1]) * node_count / 100))
    return min(limits) if limits else node_count


class Budgets:
    def __init__(self, pools: Mapping[str, NodePool], nodes: list[Node], now: float) -> None:
        self._pools, self._now = pools, now
        self._count: dict[str, int] = defaultdict(int)
        self._used: dict[str, int] = defaultdict(int)
        for n in nodes:
            pool = n.node_pool
            if pool in pools:
                self._count[pool] += 1
                if in_progress(n):
                    self._used[pool] += 1

    def remaining(self, pool: str, reason: Reason) -> int:
        allowed = allowed_disruptions(self._pools[pool], reason, node_count=self._count[pool], now=self._now)
        return max(0, allowed - self._used[pool])

    def fits(self, pools: Iterable[str], reason: Reason) -> bool:
        need: dict[str, int] = defaultdict(int)
        for p in pools:
            need[p] += 1
        return all(self.remaining(p, reason) >= k for p, k in need.items())

    def take(self, pools: Iterable[str]) -> None:
        for p in pools:
            self._used[p] += 1


