"""Static NodePools in the disruption pass: never consolidated (see ``consolidation``); drift and expiry
replace a node with one from the pool's template (``static_pools.template_launch``) rather than with
capacity planned for its pods; and when ``replicas`` is lowered the excess is removed (Karpenter's static
deprovisioning): the nodes with the fewest pods to move first, then the youngest, outside disruption
budgets (Karpenter deletes them directly) but drained through the Eviction API like any other."""

from __future__ import annotations

from collections.abc import Mapping

from autoscaler.domain.disruption.model import moves
from autoscaler.domain.models import Node, Pod
from autoscaler.domain.nodepool import NodePool
from autoscaler.domain.plan import PlanInput
from autoscaler.domain.static_pools import count, leaving


def overprovisioned(pool: NodePool, snap: PlanInput, *, on_node: Mapping[str, list[Pod]]) -> list[Node]:
    """The nodes to remove so ``pool`` has no more than ``replicas`` staying nodes."""
    if not pool.is_static:
        return []
    excess = count(pool, snap).staying - (pool.replicas or 0)
    if excess <= 0:
        return []
    mine = [n for n in snap.nodes if n.node_pool == pool.name and not leaving(n)]
    mine.sort(key=lambda n: (sum(1 for p in on_node.get(n.name, []) if moves(p)), -n.created_at, n.name))
    return mine[:excess]
