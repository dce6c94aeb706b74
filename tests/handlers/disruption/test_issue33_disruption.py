"""Issue 33 items 19 and 20: expiry as Karpenter v1 (forceful, bounded by terminationGracePeriod; today's
graceful expiry only as an opt-in), and the nodes of a NodePool removed from the cluster file drained and
deleted as Karpenter deletes a deleted NodePool's NodeClaims."""

from __future__ import annotations

from typing import Any

from tests.handlers.disruption.conftest import node_pool
from tests.kube_objects import pdb

HOUR = 3600


def _expiring_pool(**kw: Any) -> dict[str, Any]:
    return node_pool(expire_after="1h", budgets=[{"nodes": "0"}], **kw)  # budgets allow nothing at all


def test_item19_an_expired_node_is_drained_regardless_of_budgets_and_do_not_disrupt(make_world: Any) -> None:
    # Given an expired node whose NodePool's budget allows no disruption, running a do-not-disrupt pod
    w = make_world(pools=[_expiring_pool()])
    old = w.node(age=2 * HOUR)
    w.pod("keep-me", old, annotations={"karpenter.sh/do-not-disrupt": "true"})
    spare = w.node()  # room for its pod: no replacement to wait for
    # When the disruption passes run
    for _ in range(4):
        w.run()
        w.clock.advance(60)
    # Then it was drained and removed all the same (Karpenter v1: expiration is forceful)
    assert old not in w.nodes()
    assert [i["InstanceId"] for i in w.live_instances()] == [w.nodes()[spare]["spec"]["providerID"].rsplit("/", 1)[1]]


def test_item19_a_pdb_holds_an_expired_node_only_until_its_termination_grace_period(make_world: Any) -> None:
    pool = _expiring_pool()
    pool["spec"]["template"]["spec"]["terminationGracePeriod"] = "10m"
    w = make_world(pools=[pool])
    old = w.node(age=2 * HOUR)
    w.pod("db-0", old, labels={"app": "db"})
    w.node()  # room for its pod
    w.store.create("poddisruptionbudgets", pdb("db", match={"app": "db"}, max_unavailable=0))
    w.run()
    assert old in w.nodes() and w.pods_on(old) == ["db-0"]  # the PDB holds it for now
    w.clock.advance(5 * 60)
    report = w.run()
    assert old in w.nodes() and old not in report["released"]  # never given back: expiry is not abandoned
    w.clock.advance(6 * 60)  # past terminationGracePeriod since the drain began
    w.run()
    assert old not in w.nodes() and len(w.live_instances()) == 1


def test_item19_graceful_expiry_is_an_explicit_opt_in(make_world: Any) -> None:
    w = make_world(pools=[_expiring_pool()], expiry="Graceful")
    old = w.node(age=2 * HOUR)
    w.pod("p", old)
    report = w.run()
    assert old in w.nodes()
    assert any(b["node"] == old and b["guard"] == "Budget" for b in report["blocked"])


def test_item20_nodes_of_a_removed_node_pool_are_drained_and_deleted(make_world: Any) -> None:
    # Given a node of a NodePool that is no longer in the cluster file, with a pod on it
    w = make_world(pools=[node_pool()])
    orphan = w.node(pool="retired")
    w.pod("web-0", orphan)
    # When the disruption passes run
    w.run()
    w.clock.advance(60)
    w.run()
    # Then it was drained (the pod evicted, to be placed by the provisioner) and deleted, its instance gone
    assert orphan not in w.nodes() and w.pods_on(orphan) == []
    assert w.live_instances() == []
    assert "NodePoolRemoved" in w.events(orphan)
