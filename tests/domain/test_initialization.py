"""Registering and initialising nodes are capacity (Karpenter's StateNode.Taints()): the planner's view of
a node of ours drops ephemeral and startup taints until it is initialised or its registration times out."""

from __future__ import annotations

import pytest

from autoscaler.domain.initialization import as_capacity
from autoscaler.domain.models import Node, Taint
from tests.domain.scheduling_world import pool

NOW = 1_700_000_000.0
POOLS = {"default": pool(startup_taints=[{"key": "cni.example/not-ready", "effect": "NoSchedule"}])}
REGISTERING = (Taint("karpenter.sh/unregistered", "NoExecute"), Taint("node.kubernetes.io/not-ready", "NoSchedule"),
               Taint("cni.example/not-ready", "NoSchedule"), Taint("dedicated", "NoSchedule", "gpu"))


def _node(*, labels: dict[str, str] | None = None, age: float = 60, ready: bool = False) -> Node:
    return Node(name="n", labels={"karpenter.sh/nodepool": "default", **(labels or {})}, taints=REGISTERING,
                ready=ready, created_at=NOW - age)


@pytest.mark.parametrize(("node", "kept", "ready"), [
    # registering: registration, not-ready and startup taints ignored; the pool's own taint stays
    (_node(), ("dedicated",), True),
    # initialised: every taint counts (a NotReady node later is not capacity)
    (_node(labels={"karpenter.sh/initialized": "true"}), ("karpenter.sh/unregistered", "node.kubernetes.io/not-ready",
                                                          "cni.example/not-ready", "dedicated"), False),
    # registration timed out: seen as it is
    (_node(age=16 * 60), ("karpenter.sh/unregistered", "node.kubernetes.io/not-ready", "cni.example/not-ready",
                          "dedicated"), False),
    # not ours (no NodePool of this configuration): untouched
    (Node(name="n", labels={}, taints=REGISTERING, created_at=NOW - 60),
     ("karpenter.sh/unregistered", "node.kubernetes.io/not-ready", "cni.example/not-ready", "dedicated"), False),
])
def test_planner_view_of_a_node(node: Node, kept: tuple[str, ...], ready: bool) -> None:
    view = as_capacity(node, POOLS, now=NOW, registration_timeout=15 * 60)
    assert tuple(t.key for t in view.taints) == kept and view.ready is ready
