"""The disruption pass under faults (issue 18 items 7-10): a cordon left without a node-state record, a
refused TerminateInstances, a NodePool removed from the cluster file (its nodes drained and deleted), and a
pass killed between TerminateInstances and deleting the Node. Emulator for Kubernetes, in-process moto for
EC2 (the refused TerminateInstances is answered at botocore's ``before-call`` hook, which moto cannot be told
to refuse)."""

from __future__ import annotations

from typing import Any

from autoscaler.domain.keys import DRAIN_REASON_ANNOTATION, DRAIN_STARTED_ANNOTATION, OWNER_ANNOTATION
from tests.handlers.disruption.conftest import node_pool

DISRUPTED = {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}


def _cordoned(w: Any, name: str) -> bool:
    return bool(w.nodes()[name]["spec"].get("unschedulable"))


def _tainted(w: Any, name: str) -> bool:
    return any(t.get("key") == DISRUPTED["key"] for t in w.nodes()[name]["spec"].get("taints") or ())


def _stuck(w: Any, name: str) -> None:
    """What a pass killed right after cordoning left: taint and cordon, no node-state record."""
    w.store.patch("nodes", None, name, {"spec": {"unschedulable": True, "taints": [DISRUPTED]}})


def test_a_cordon_left_without_a_record_is_given_back_and_frees_its_budget_slot(make_world: Any) -> None:
    w = make_world()  # the default budget: 10 % of the pool's nodes, one node here
    stuck, other = w.node(), w.node()
    _stuck(w, stuck)
    w.run()
    assert not _cordoned(w, stuck) and not _tainted(w, stuck)  # reconciled on the very next pass
    w.clock.advance(35)
    report = w.run()
    assert other in report["removed"]  # the budget slot is free again (before: "blocked by Budget")
    assert not [b for b in report["blocked"] if b["guard"] == "Budget" and b["node"] == other]


def test_a_refused_terminate_instances_does_not_end_the_pass(make_world: Any) -> None:
    w = make_world(pools=[node_pool(budgets=[{"nodes": "100%"}])])
    first, second = w.node(), w.node()
    w.run()
    w.clock.advance(35)
    refused: list[int] = []

    def refuse_once(**_: Any) -> Any:
        if refused:
            return None
        refused.append(1)
        return {"Error": {"Code": "UnauthorizedOperation", "Message": "refused by an SCP"},
                "ResponseMetadata": {"HTTPStatusCode": 403}}
    w.ec2.meta.events.register("before-call.ec2.TerminateInstances", lambda **kw: _answer(refuse_once(**kw)))
    report = w.run()  # before the fix: the pass raised at the first node
    assert len(report["removed"]) == 1
    left = ({first, second} - set(report["removed"])).pop()
    assert _cordoned(w, left) and left in report["draining"]  # kept drained and recorded, tried again
    report = w.run()
    assert report["removed"] == [left] and w.live_instances() == []  # nothing leaked


class _Http:
    def __init__(self, status: int) -> None:
        self.status_code, self.headers, self.content = status, {}, b""


def _answer(error: dict[str, Any] | None) -> Any:
    if error is None:
        return None
    return _Http(error["ResponseMetadata"]["HTTPStatusCode"]), error


def test_nodes_of_a_removed_node_pool_are_drained_deleted_and_reported(make_world: Any) -> None:
    # A node of a NodePool removed from the cluster file, and one this function was draining when it was
    # removed: both are drained and deleted (issue 33 item 20, Karpenter deletes the NodeClaims), reported
    w = make_world(pools=[node_pool()])
    kept = w.node(pool="retired")
    draining = w.node(pool="retired", annotations={OWNER_ANNOTATION: "disruption",
                                                   DRAIN_STARTED_ANNOTATION: str(int(w.clock.now())),
                                                   DRAIN_REASON_ANNOTATION: "empty"})
    w.store.patch("nodes", None, draining, {"spec": {"unschedulable": True, "taints": [DISRUPTED]}})
    report = w.run()
    assert w.sink.total("NodesOfRemovedNodePool") == 2
    assert "NodePoolRemoved" in w.events(kept)
    assert any("NodePool retired" in n for n in report["notes"])
    assert set(report["removed"]) == {kept, draining} and w.live_instances() == []
    assert not set(w.nodes()) & {kept, draining}


def test_killed_between_terminate_and_node_delete_the_next_pass_deletes_the_node(make_world: Any) -> None:
    w = make_world()
    iid = w.launch()
    name = w.register(iid, annotations={OWNER_ANNOTATION: "disruption",
                                        DRAIN_STARTED_ANNOTATION: str(int(w.clock.now())),
                                        DRAIN_REASON_ANNOTATION: "empty"})
    w.store.patch("nodes", None, name, {"spec": {"unschedulable": True, "taints": [DISRUPTED]}})
    w.ec2.terminate_instances(InstanceIds=[iid])  # the pass that did this died before deleting the Node
    report = w.run()
    assert name not in w.nodes()
    assert name in report["removed"] and name not in report["released"]
    assert "DisruptionBlocked" not in w.events(name)  # never "not this autoscaler's"
