"""Static NodePools (``spec.replicas``) in the disruption function: never consolidated, not even when
empty; the excess removed when ``replicas`` is lowered; expiry (and drift) replace a node with a template
node first, within ``limits.nodes``."""

from __future__ import annotations

from typing import Any

from tests.handlers.disruption.conftest import node_pool


def test_an_empty_static_node_is_never_consolidated(make_world: Any) -> None:
    # GIVEN a static pool of two nodes that would be removed at once were it dynamic (WhenEmpty, 0s)
    w = make_world(pools=[node_pool(replicas=2, policy="WhenEmpty", consolidate_after="0s")])
    names = [w.node(), w.node()]
    # WHEN passes run over ten minutes
    for _ in range(3):
        w.run()
        w.clock.advance(300)
    report = w.run()
    # THEN both nodes stay and nothing was decided
    assert sorted(w.nodes()) == sorted(names) and report["decisions"] == []


def test_lowering_replicas_removes_the_excess_emptiest_first(make_world: Any) -> None:
    # GIVEN a static pool lowered to one replica while it runs three nodes, one of them busy
    w = make_world(pools=[node_pool(replicas=1)])
    busy, idle_a, idle_b = w.node(), w.node(), w.node()
    w.pod("web", busy)
    # WHEN a pass runs
    report = w.run()
    # THEN the two idle nodes are removed (reason Overprovisioned) and the busy one stays
    assert sorted(report["removed"]) == sorted([idle_a, idle_b])
    assert {d["reason"] for d in report["decisions"]} == {"Overprovisioned"}
    assert list(w.nodes()) == [busy]
    assert w.sink.total("NodesDisrupted", Reason="Overprovisioned") == 2


def test_an_expired_static_node_is_replaced_by_a_template_node_first(make_world: Any) -> None:
    # GIVEN a static pool of one node, expired, running a pod
    w = make_world(pools=[node_pool(replicas=1, expire_after="1h")])
    old_iid = w.launch()
    old = w.register(old_iid, age=7200)
    w.pod("web", old)
    before = {i["InstanceId"] for i in w.live_instances()}
    # WHEN a pass runs
    report = w.run()
    # THEN a template node of the pool is launched and the old node is not drained yet
    [decision] = report["decisions"]
    assert decision["reason"] == "Expired" and decision["action"] == "replace"
    [new_iid] = {i["InstanceId"] for i in w.live_instances()} - before
    assert old in w.nodes() and w.pods_on(old) == ["web"] and report["replacing"] == [old]
    assert w.run()["replacing"] == [old]  # still waiting: the replacement has not registered
    # WHEN the replacement registers and a pass runs
    w.register(new_iid)
    report = w.run()
    # THEN the old node is drained and terminated; the pool is back at one node
    assert report["removed"] == [old] and w.state(old_iid) in ("shutting-down", "terminated")
    assert len(w.nodes()) == 1


def test_a_static_replacement_never_passes_limits_nodes(make_world: Any) -> None:
    # GIVEN a static pool of one node whose limits.nodes leave no room for a second one
    w = make_world(pools=[node_pool(replicas=1, expire_after="1h", limits={"nodes": 1})])
    old = w.register(w.launch(), age=7200)
    # WHEN a pass runs
    report = w.run()
    # THEN the expired node is kept (guard NodeLimit) and nothing launched
    assert report["decisions"] == [] and [b["guard"] for b in report["blocked"]] == ["NodeLimit"]
    assert old in w.nodes() and len(w.live_instances()) == 1


def test_a_drifted_static_node_is_replaced_by_a_template_node_first(make_world: Any) -> None:
    # GIVEN a static pool of one busy node WHEN its template changes (a new label)
    w = make_world(pools=[node_pool(replicas=1)])
    old_iid = w.launch()
    old = w.register(old_iid)
    w.pod("web", old)
    before = {i["InstanceId"] for i in w.live_instances()}
    w.reconfigure(pools=[node_pool(replicas=1, labels={"team": "payments"})])
    report = w.run()
    # THEN it is Drifted and a template node launches while the old node keeps its pod
    [decision] = report["decisions"]
    assert (decision["reason"], decision["action"]) == ("Drifted", "replace")
    [new_iid] = {i["InstanceId"] for i in w.live_instances()} - before
    assert w.pods_on(old) == ["web"]
    # WHEN the replacement registers THEN the old node goes
    w.register(new_iid)
    assert w.run()["removed"] == [old] and w.state(old_iid) in ("shutting-down", "terminated")
