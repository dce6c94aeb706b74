"""Expiration: a node older than its NodePool's ``expireAfter`` is replaced (capacity for its pods
first, then the drain), within the pool's budgets for ``Expired``. Static NodePools expire too."""

from __future__ import annotations

from autoscaler.domain.models import Node
from autoscaler.domain.nodepool import NodePool


def expired(node: Node, pool: NodePool, *, now: float) -> bool:
    after = pool.disruption.expire_after
    return after is not None and bool(node.created_at) and now - node.created_at >= after
