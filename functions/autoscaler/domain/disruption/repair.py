"""Node repair: a node whose ``Ready`` condition has been False or Unknown for 30 minutes, or whose EKS
node monitoring agent reports a condition False past its toleration, is replaced forcefully: Karpenter
expires its termination grace period at once, so pods are deleted without waiting on PDBs or
``do-not-disrupt``, outside disruption budgets. Repair stops for a NodePool when more than 20 % of its
nodes (rounded up, like a PDB's percentage) are unhealthy: something larger than one node is wrong.

The policies and tolerations are Karpenter provider-aws's ``RepairPolicies``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable

from autoscaler.domain.models import Node, NodeCondition

MINUTE = 60.0
# (condition type, status, toleration seconds)
REPAIR_POLICIES: tuple[tuple[str, str, float], ...] = (
    ("Ready", "False", 30 * MINUTE),
    ("Ready", "Unknown", 30 * MINUTE),
    ("AcceleratedHardwareReady", "False", 10 * MINUTE),
    ("StorageReady", "False", 30 * MINUTE),
    ("NetworkingReady", "False", 30 * MINUTE),
    ("KernelReady", "False", 30 * MINUTE),
    ("ContainerRuntimeReady", "False", 30 * MINUTE),
)
ALLOWED_UNHEALTHY_PERCENT = 20


def unhealthy(node: Node) -> tuple[NodeCondition, float] | None:
    """The matching unhealthy condition due first and its toleration, or None (healthy)."""
    found: tuple[NodeCondition, float] | None = None
    for kind, status, toleration in REPAIR_POLICIES:
        cond = node.condition(kind)
        if cond is not None and cond.status == status and (
                found is None or cond.since + toleration < found[0].since + found[1]):
            found = (cond, toleration)
    return found


def repair_due(node: Node, *, now: float) -> str | None:
    """Why ``node`` must be repaired now, or None."""
    found = unhealthy(node)
    if found is None:
        return None
    cond, toleration = found
    if now < cond.since + toleration:
        return None
    return (f"condition {cond.type}={cond.status} for {int((now - cond.since) // 60)} min "
            f"(tolerated for {int(toleration // 60)} min)")


def unhealthy_pools(nodes: Iterable[Node]) -> dict[str, str]:
    """NodePools with more than 20 % of their nodes unhealthy (any matching condition, however recent),
    each with a sentence saying so."""
    total: dict[str, int] = defaultdict(int)
    sick: dict[str, int] = defaultdict(int)
    for n in nodes:
        pool = n.node_pool
        if not pool:
            continue
        total[pool] += 1
        if unhealthy(n) is not None:
            sick[pool] += 1
    out = {}
    for pool, count in sick.items():
        threshold = math.ceil(ALLOWED_UNHEALTHY_PERCENT * total[pool] / 100)
        if count > threshold:
            out[pool] = (f"{count} of {total[pool]} nodes of NodePool {pool} are unhealthy (more than "
                         f"{ALLOWED_UNHEALTHY_PERCENT}%): repair is paused for the pool")
    return out
