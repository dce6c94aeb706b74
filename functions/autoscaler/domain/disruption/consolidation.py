"""Consolidation: Empty nodes (only DaemonSet, mirror and finished pods, seen empty for
``consolidateAfter``) are deleted; Underutilized ones (``WhenEmptyOrUnderutilized``, ``consolidateAfter``
after the last pod change) are deleted when their pods fit elsewhere or replaced by one cheaper node:
multi-node first, then the single node with the most saving per disrupted pod; spot-to-spot only with
15 cheaper types (Karpenter's rule). Static NodePools are never consolidated."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace

from autoscaler.domain.disruption.budgets import Budgets
from autoscaler.domain.disruption.model import (
    MIN_SPOT_TO_SPOT_TYPES,
    Candidate,
    Reason,
    Settings,
    moves,
    pods_by_node,
)
from autoscaler.domain.disruption.simulation import cheapest_prices, simulate
from autoscaler.domain.keys import CAPACITY_TYPE_LABEL, INSTANCE_TYPE_LABEL
from autoscaler.domain.models import Node, Pod
from autoscaler.domain.nodepool import NodePool
from autoscaler.domain.plan import PlanInput


def consolidation(snapshot: PlanInput, nodes: list[Node], *, prices: Mapping[str, float],
                  settings: Settings) -> Candidate | None:
    """Delete ``nodes`` when their pods fit elsewhere, or replace them with one cheaper node."""
    names = tuple(n.name for n in nodes)
    before = sum(prices[n] for n in names)
    sim = simulate(snapshot, names)
    if sim.unschedulable:
        return None
    if not sim.launches:
        return Candidate("Underutilized", "delete", names, sim.pods, before)
    if len(sim.launches) != 1:
        return None
    launch = sim.launches[0]
    all_spot = all(n.labels.get(CAPACITY_TYPE_LABEL) == "spot" for n in nodes)
    if all_spot and launch.capacity_type == "spot" and not settings.spot_to_spot_consolidation:
        return None
    # EC2 may pick any listed type: keep only those cheaper than what they replace. When a listed type
    # is one being removed, replacing with it again only churns (deleting the others saves as much):
    # Karpenter then keeps only types cheaper than that node.
    cheapest = cheapest_prices(snapshot.offerings, launch)
    limit = before
    same = [prices[n.name] for n in nodes if n.labels.get(INSTANCE_TYPE_LABEL) in launch.instance_types]
    if len(nodes) > 1 and same:
        limit = min(limit, max(same))
    cheaper = tuple(t for t in launch.instance_types if cheapest.get(t, math.inf) < limit)
    if not cheaper:
        return None
    if all_spot and launch.capacity_type == "spot" and len(nodes) == 1:
        # Karpenter's spot-to-spot rule: EC2 picks a spot type by availability as well as price, so a
        # replacement offered every cheaper type could land on one that is itself consolidated again.
        # Replace one spot node only when at least 15 cheaper types remain, and offer only the 15
        # cheapest: whatever EC2 picks is then never worth replacing at once.
        if len(cheaper) < MIN_SPOT_TO_SPOT_TYPES:
            return None
        cheaper = cheaper[:MIN_SPOT_TO_SPOT_TYPES]
    launch = replace(launch, instance_types=cheaper, hourly_price=cheapest[cheaper[0]])
    return Candidate("Underutilized", "replace", names, sim.pods, before, launch.hourly_price, (launch,))


def consolidation_reason(node: Node, pods: list[Pod], pool: NodePool, *, now: float,
                         empty_since: Mapping[str, float]) -> Reason | None:
    """Empty or Underutilized, or None. A static NodePool keeps its node count: never consolidated,
    not even when empty (Karpenter ignores its consolidationPolicy and consolidateAfter)."""
    if pool.is_static:
        return None
    d = pool.disruption
    moving = [p for p in pods if moves(p)]
    if not moving and d.consolidate_after is not None:
        since = empty_since.get(node.name)
        if since is not None and now - since >= d.consolidate_after:
            return "Empty"
    if moving and d.consolidation_policy == "WhenEmptyOrUnderutilized" and d.consolidate_after is not None:
        # Karpenter measures consolidateAfter from the last pod scheduling event on the node; the
        # newest pod's creation (or the node's) is what the cluster state tells us.
        last_change = max([node.created_at, *(p.created_at for p in pods)])
        if now - last_change >= d.consolidate_after:
            return "Underutilized"
    return None


def consolidate(snap: PlanInput, nodes: list[Node], *, prices: Mapping[str, float | None], settings: Settings,
                 budgets: Budgets, pool_of: Mapping[str, str]) -> Candidate | None:
    """Karpenter's order: multi-node consolidation (the longest prefix of the candidates, ordered by
    saving per disrupted pod, that can be deleted or replaced by one cheaper node), else the single
    node with the most saving per disrupted pod."""
    priced = {n.name: p for n in nodes if (p := prices[n.name]) is not None}
    moving = pods_by_node(p for p in snap.pods if moves(p))
    ordered = sorted((n for n in nodes if n.name in priced),
                     key=lambda n: (-priced[n.name] / max(1, len(moving.get(n.name, []))), n.name))
    prefix: list[Node] = []
    for n in ordered:
        if len(prefix) >= settings.max_multi_node_candidates:
            break
        if budgets.fits([pool_of[m.name] for m in (*prefix, n)], "Underutilized"):
            prefix.append(n)
    for size in range(len(prefix), 1, -1):
        found = consolidation(snap, prefix[:size], prices=priced, settings=settings)
        if found is not None:
            return found
    singles = [c for n in ordered if budgets.fits([pool_of[n.name]], "Underutilized")
               if (c := consolidation(snap, [n], prices=priced, settings=settings)) is not None]
    return max(singles, key=lambda c: (c.saving_per_pod, c.saving), default=None)
