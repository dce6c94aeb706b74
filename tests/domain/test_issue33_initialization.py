"""Issue 33 item 6: a registered node's startup taints are ignored until it is initialised, however long
its startup takes; only an unregistered node times out (Karpenter's StateNode.Taints and registration TTL)."""

from __future__ import annotations

from autoscaler.domain.initialization import as_capacity
from autoscaler.domain.models import Node, Taint
from tests.domain.scheduling_world import pool

NOW = 1_700_000_000.0
POOLS = {"default": pool(startup_taints=[{"key": "cni.example/not-ready", "effect": "NoSchedule"}])}


def test_item6_startup_taints_of_a_registered_node_are_ignored_past_the_registration_timeout() -> None:
    # Given a node that registered (no karpenter.sh/unregistered taint) 20 minutes ago, is Ready, and whose
    # CNI agent has not removed its startup taint yet
    node = Node(name="n", labels={"karpenter.sh/nodepool": "default"}, ready=True, created_at=NOW - 20 * 60,
                taints=(Taint("cni.example/not-ready", "NoSchedule"), Taint("dedicated", "NoSchedule", "gpu")))
    # Then the planner still counts it as the capacity its pods wait for (no duplicate launch)
    view = as_capacity(node, POOLS, now=NOW, registration_timeout=15 * 60)
    assert [t.key for t in view.taints] == ["dedicated"] and view.ready


def test_item6_a_registered_node_not_yet_ready_is_still_capacity_after_the_timeout() -> None:
    node = Node(name="n", labels={"karpenter.sh/nodepool": "default"}, ready=False, created_at=NOW - 20 * 60,
                taints=(Taint("node.kubernetes.io/not-ready", "NoSchedule"),))
    view = as_capacity(node, POOLS, now=NOW, registration_timeout=15 * 60)
    assert view.taints == () and view.ready


def test_item6_only_an_unregistered_node_times_out() -> None:
    node = Node(name="n", labels={"karpenter.sh/nodepool": "default"}, ready=False, created_at=NOW - 16 * 60,
                taints=(Taint("karpenter.sh/unregistered", "NoExecute"), Taint("cni.example/not-ready", "NoSchedule")))
    view = as_capacity(node, POOLS, now=NOW, registration_timeout=15 * 60)
    assert [t.key for t in view.taints] == ["karpenter.sh/unregistered", "cni.example/not-ready"]
    assert not view.ready
