"""Registering and initialising nodes count as capacity (Karpenter's ``StateNode.Taints()``).

A node of ours registers with ``karpenter.sh/unregistered:NoExecute`` (and, until the kubelet is Ready,
``node.kubernetes.io/not-ready``) plus its NodePool's ``startupTaints``. Its pods cannot bind until those
are gone, yet the node *is* the capacity they were launched for: a planner that saw the taints would
launch again on every scale-up. So, until the node is initialised (Ready, registration and startup
taints gone: the lifecycle step then labels it ``karpenter.sh/initialized=true``), the planner sees it
without those taints and as Ready, however long a startup taint (a CNI agent) takes. Only a node still
unregistered (carrying ``karpenter.sh/unregistered``) past the registration timeout is seen as it is:
that is the one the lifecycle step gives up on. An initialised node that later goes NotReady keeps its
taints: it is not capacity.
"""

from __future__ import annotations

from dataclasses import replace

from autoscaler.domain.keys import (
    INITIALIZED_LABEL,
    NODEPOOL_LABEL,
    NOT_READY_TAINT_KEY,
    UNINITIALIZED_TAINT_KEY,
    UNREACHABLE_TAINT_KEY,
    UNREGISTERED_TAINT_KEY,
)
from autoscaler.domain.models import Node, Taint
from autoscaler.domain.nodepool import NodePool
from autoscaler.domain.plan import PlanInput

# Karpenter's KnownEphemeralTaints plus its unregistered taint.
EPHEMERAL_TAINT_KEYS = frozenset({UNREGISTERED_TAINT_KEY, NOT_READY_TAINT_KEY, UNREACHABLE_TAINT_KEY,
                                  UNINITIALIZED_TAINT_KEY})


def is_initialized(node: Node) -> bool:
    return node.labels.get(INITIALIZED_LABEL) == "true"


def startup_taints_gone(node: Node, pool: NodePool) -> bool:
    startup = {(t.key, t.effect) for t in pool.startup_taints}
    return not any((t.key, t.effect) in startup for t in node.taints)


def ready_to_initialize(node: Node, pool: NodePool) -> bool:
    """Ready, registered and without startup taints: the lifecycle step may label it initialised."""
    return (node.ready and startup_taints_gone(node, pool)
            and not any(t.key == UNREGISTERED_TAINT_KEY for t in node.taints))


def as_capacity(node: Node, pools: dict[str, NodePool], *, now: float, registration_timeout: float) -> Node:
    """The node as the planner should count it (see the module docstring)."""
    pool = pools.get(node.labels.get(NODEPOOL_LABEL, ""))
    if pool is None or is_initialized(node) or node.deleting:
        return node
    unregistered = any(t.key == UNREGISTERED_TAINT_KEY for t in node.taints)
    if unregistered and node.created_at and now - node.created_at >= registration_timeout:
        return node
    startup = {(t.key, t.effect) for t in pool.startup_taints}
    kept: tuple[Taint, ...] = tuple(t for t in node.taints
                                    if t.key not in EPHEMERAL_TAINT_KEYS and (t.key, t.effect) not in startup)
    return replace(node, taints=kept, ready=True)


def capacity_view(snap: PlanInput, *, now: float, registration_timeout: float) -> PlanInput:
    """The cluster as the planner counts it, the one view the provisioner's pass and ``autoscaler plan``
    both plan from: registering and initialising nodes as capacity (``as_capacity``), and in-flight
    instances with their NodePool's taints (an instance will register with them, and its tags do not carry
    them: pods that do not tolerate them must not count it as their capacity)."""
    pools = {p.name: p for p in snap.node_pools}
    return replace(
        snap,
        in_flight=[replace(f, taints=pools[f.node_pool].taints) if not f.taints and f.node_pool in pools else f
                   for f in snap.in_flight],
        nodes=[as_capacity(n, pools, now=now, registration_timeout=registration_timeout) for n in snap.nodes])
