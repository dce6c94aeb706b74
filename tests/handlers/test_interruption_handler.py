"""The interruption handler end to end in-process: SQS batches of the sample events (and malformed,
unknown, duplicated and out-of-order ones) through the real ``handler(event, context)`` against moto
EC2 and the Kubernetes API emulator."""

from __future__ import annotations

import json
from typing import Any

import pytest

from autoscaler.domain.keys import DRAIN_STARTED_ANNOTATION, REPLACEMENT_REQUESTED_ANNOTATION
from tests import kube_objects as ko
from tests.handlers.interruption_world import PROVISIONER, World, demo_config, event_for

DISRUPTED = "karpenter.sh/disrupted"


def taints(world: World, node: str) -> set[tuple[str, str]]:
    obj = world.node(node)
    assert obj is not None, f"node {node} is gone"
    return {(t["key"], t["effect"]) for t in obj["spec"].get("taints") or ()}


def cordoned(world: World, node: str) -> bool:
    obj = world.node(node)
    assert obj is not None
    return bool(obj["spec"].get("unschedulable"))


def annotations(world: World, node: str) -> dict[str, str]:
    obj = world.node(node)
    assert obj is not None
    return dict(obj["metadata"].get("annotations") or {})


def workload(world: World, node: str) -> None:
    """Two apps pods, a critical DNS pod and a DaemonSet pod on ``node``."""
    world.add_pod("web-1", node, labels={"app": "web"})
    world.add_pod("web-2", node, labels={"app": "web"})
    world.add_pod("coredns", node, namespace="kube-system", priority_class="system-cluster-critical")
    world.add_pod("node-agent", node, namespace="kube-system", owner_kind="DaemonSet")


def metric(world: World, name: str, **dims: str) -> float:
    return world.sink.total(name, **dims)


# ----- every sample event -----------------------------------------------------------------------------

def test_spot_warning_cordons_requests_replacement_drains_in_order_and_terminates_our_instance(world: World) -> None:
    iid = world.add_node("n1")
    workload(world, "n1")
    world.kube.store.create("poddisruptionbudgets", ko.pdb("web", match={"app": "web"}, max_unavailable=1),
                            namespace="default")

    response = world.run(event_for("spot-interruption-warning", iid, event_id="spot-1"))

    assert response == {"batchItemFailures": []}
    assert world.node("n1") is None  # drained, our instance terminated, Node deleted
    assert world.state(iid) in ("shutting-down", "terminated")
    # Workloads first, one at a time as the PDB allows; the critical pod after them; the DaemonSet pod stays.
    assert world.evictions() == ["default/web-1", "default/web-2", "kube-system/coredns"]
    assert world.pods_on("n1") == ["kube-system/node-agent"]
    assert world.invokes.calls[0]["FunctionName"] == PROVISIONER
    assert world.invokes.calls[0]["InvocationType"] == "Event"
    assert world.invokes.payloads == [{"source": "interruption", "kind": "replacement", "nodes": ["n1"],
                                       "unavailable": [["m5.large", "us-west-2a", "spot"]], "eventId": "spot-1"}]
    assert metric(world, "InterruptionEvents", Kind="spotInterruption", Action="drain") == 1
    assert metric(world, "InterruptionOutcomes", Kind="spotInterruption", Outcome="acted") == 1
    assert metric(world, "PodsEvicted") == 3
    assert len([p for p in world.sink.points if p[0] == "EventToCordonSeconds"]) == 1  # figures: the benchmark
    assert len([p for p in world.sink.points if p[0] == "DrainSeconds"]) == 1
    assert "SpotInterrupted" in world.node_events("n1")


def test_rebalance_taints_prefer_no_schedule_and_requests_capacity_without_draining(world: World) -> None:
    iid = world.add_node("n1")
    workload(world, "n1")

    response = world.run(event_for("rebalance-recommendation", iid, event_id="rb-1"))

    assert response == {"batchItemFailures": []}
    assert taints(world, "n1") == {(DISRUPTED, "PreferNoSchedule")}
    assert not cordoned(world, "n1") and DRAIN_STARTED_ANNOTATION not in annotations(world, "n1")
    assert world.evictions() == [] and world.state(iid) == "running"
    assert world.invokes.payloads == [{"source": "interruption", "kind": "replacement", "nodes": ["n1"],
                                       "unavailable": [["m5.large", "us-west-2a", "spot"]], "eventId": "rb-1"}]
    assert metric(world, "InterruptionOutcomes", Kind="rebalance", Outcome="acted") == 1


def test_scheduled_change_drains_every_instance_and_terminates_only_ours(world: World) -> None:
    ours = world.add_node("ours", capacity_type="on-demand")
    theirs = world.add_node("theirs", owned=False, capacity_type="on-demand")
    world.add_pod("a", "ours")
    world.add_pod("b", "theirs")

    response = world.run(event_for("health-scheduled-change", ours, theirs, event_id="health-1"))

    assert response == {"batchItemFailures": []}
    assert world.node("ours") is None and world.state(ours) in ("shutting-down", "terminated")
    # Not launched by us: protected like the Node Termination Handler does (cordoned, drained), never terminated.
    assert world.state(theirs) == "running"
    assert cordoned(world, "theirs") and (DISRUPTED, "NoSchedule") in taints(world, "theirs")
    assert annotations(world, "theirs")["autoscaler.eks.aws/drain-reason"] == "scheduledChange"
    assert world.pods_on("theirs") == [] and world.pods_on("ours") == []
    # A scheduled change says nothing about the capacity pool: no offering is marked unavailable.
    assert world.invokes.payloads == [{"source": "interruption", "kind": "replacement", "nodes": ["ours", "theirs"],
                                       "unavailable": [], "eventId": "health-1"}]
    assert "Drained" in world.node_events("theirs")


def test_state_change_terminated_deletes_the_node_once_its_pods_are_gone(world: World) -> None:
    iid = world.add_node("n1")
    world.add_pod("web-1", "n1", grace=300)

    response = world.run(event_for("state-change-terminated", iid))

    assert response == {"batchItemFailures": []}
    assert world.node("n1") is None and world.pods_on("n1") == []
    assert world.state(iid) == "running"  # EC2 said it is gone; we terminate nothing for a state change to it


@pytest.mark.parametrize("state", ["stopping", "stopped"])
def test_state_change_stopping_drains_and_terminates_our_stopped_instance(world: World, state: str) -> None:
    iid = world.add_node("n1")
    world.add_pod("web-1", "n1")
    assert world.run(event_for("state-change-terminated", iid, state=state)) == {"batchItemFailures": []}
    assert world.node("n1") is None and world.state(iid) in ("shutting-down", "terminated")


@pytest.mark.parametrize(("sample", "kind"), [("health-other-service", "scheduledChange"),
                                              ("state-change-running", "stateChange")])
def test_events_that_need_nothing_are_acknowledged_and_counted(world: World, sample: str, kind: str) -> None:
    iid = world.add_node("n1")
    body = event_for(sample, iid) if sample.startswith("state") else event_for(sample)
    assert world.run(body) == {"batchItemFailures": []}
    assert taints(world, "n1") == set() and not cordoned(world, "n1") and world.invokes.calls == []
    assert metric(world, "InterruptionOutcomes", Kind=kind, Outcome="ignored") == 1


# ----- bad, unknown, foreign -----------------------------------------------------------------------------

@pytest.mark.parametrize(("body", "kind"), [
    ("not json at all", "malformed"),
    (json.dumps(["a", "list"]), "malformed"),
    (json.dumps({"id": "x", "source": "aws.ec2"}), "malformed"),  # no detail-type, time, detail
    (json.dumps({**event_for("spot-interruption-warning"), "detail": {"instance-action": "terminate"}}), "malformed"),
    (json.dumps({**event_for("spot-interruption-warning"), "source": "aws.s3", "detail-type": "Object Created"}),
     "unknown"),
])
def test_malformed_and_unknown_messages_are_acknowledged_with_a_metric(world: World, body: str, kind: str) -> None:
    iid = world.add_node("n1")
    good = event_for("spot-interruption-warning", iid)
    response = world.run(body, good, message_ids=["bad", "good"])
    assert response == {"batchItemFailures": []}  # neither retried nor blocking the good one
    assert metric(world, "InterruptionOutcomes", Kind=kind, Outcome="ignored") == 1
    assert metric(world, "InterruptionEvents", Kind=kind, Action="ignore") == 1
    assert world.node("n1") is None  # the good message in the same batch was handled


def test_instances_that_are_not_nodes_of_this_cluster_are_acknowledged_and_untouched(world: World) -> None:
    stranger = world.launch(owned=True)  # even our own tags: no node, nothing to do
    response = world.run(event_for("spot-interruption-warning", stranger))
    assert response == {"batchItemFailures": []}
    assert world.state(stranger) == "running" and world.invokes.calls == []
    assert metric(world, "InterruptionOutcomes", Kind="spotInterruption", Outcome="notInCluster") == 1


def test_a_node_not_launched_by_us_is_drained_but_never_terminated(world: World) -> None:
    iid = world.add_node("n1", owned=False)
    workload(world, "n1")
    assert world.run(event_for("spot-interruption-warning", iid)) == {"batchItemFailures": []}
    assert world.state(iid) == "running"
    assert cordoned(world, "n1") and world.pods_on("n1") == ["kube-system/node-agent"]


# ----- nothing lost: PDBs, retries, duplicates, order ---------------------------------------------------

def test_drain_blocked_by_a_pdb_is_retried_and_the_retry_continues_the_same_drain(world: World) -> None:
    iid = world.add_node("n1")
    for i in range(3):
        world.add_pod(f"web-{i}", "n1", labels={"app": "web"})
    world.kube.store.create("poddisruptionbudgets", ko.pdb("web", match={"app": "web"}, min_available=2),
                            namespace="default")
    body = event_for("spot-interruption-warning", iid, event_id="spot-pdb")

    # 12 s left, 10 s safety margin: a 2 s drain window in which the PDB lets exactly one pod go.
    first = world.run(body, message_ids=["m1"], remaining_ms=12_000)

    assert first == {"batchItemFailures": [{"itemIdentifier": "m1"}]}
    assert len(world.pods_on("n1")) == 2 and world.state(iid) == "running"
    assert cordoned(world, "n1") and (DISRUPTED, "NoSchedule") in taints(world, "n1")
    started = annotations(world, "n1")[DRAIN_STARTED_ANNOTATION]
    assert metric(world, "EvictionsBlockedByPDB") >= 1
    assert metric(world, "InterruptionOutcomes", Kind="spotInterruption", Outcome="failed") == 1
    assert "DrainIncomplete" in world.node_events("n1")

    world.kube.store.delete("poddisruptionbudgets", "default", "web")  # e.g. the replacement pods became ready
    second = world.run(body, message_ids=["m1"])

    assert second == {"batchItemFailures": []}
    assert world.node("n1") is None and world.state(iid) in ("shutting-down", "terminated")
    assert len(world.invokes.calls) == 1  # the retry did not ask for capacity again
    drain_started = [p for p in world.sink.points if p[0] == "DrainSeconds"]
    assert len(drain_started) == 1 and started  # measured from the first attempt's annotation


def test_duplicates_are_harmless(world: World) -> None:
    ours = world.add_node("ours", owned=False)
    world.add_pod("web-1", "ours")
    body = event_for("spot-interruption-warning", ours, event_id="dup")

    assert world.run(body, body, message_ids=["a", "b"]) == {"batchItemFailures": []}
    requested = annotations(world, "ours")[REPLACEMENT_REQUESTED_ANNOTATION]
    assert world.run(body, message_ids=["c"]) == {"batchItemFailures": []}  # EventBridge sent it twice

    assert len(world.invokes.calls) == 1
    assert annotations(world, "ours")[REPLACEMENT_REQUESTED_ANNOTATION] == requested
    assert world.evictions() == ["default/web-1"]
    assert taints(world, "ours") == {(DISRUPTED, "NoSchedule")}


def test_terminated_before_the_spot_warning_is_harmless(world: World) -> None:
    iid = world.add_node("n1")
    world.add_pod("web-1", "n1")
    spot = event_for("spot-interruption-warning", iid)
    gone = event_for("state-change-terminated", iid)

    assert world.run(gone, spot) == {"batchItemFailures": []}
    assert world.node("n1") is None
    assert world.run(spot) == {"batchItemFailures": []}  # redelivered later: the node is simply not there
    assert metric(world, "InterruptionOutcomes", Kind="spotInterruption", Outcome="notInCluster") == 2
    assert world.state(iid) == "running"  # nothing terminated an instance EC2 already took


def test_a_rebalance_after_the_spot_warning_does_not_loosen_the_drain(world: World) -> None:
    iid = world.add_node("n1", owned=False)
    assert world.run(event_for("spot-interruption-warning", iid)) == {"batchItemFailures": []}
    assert world.run(event_for("rebalance-recommendation", iid)) == {"batchItemFailures": []}
    assert taints(world, "n1") == {(DISRUPTED, "NoSchedule")} and cordoned(world, "n1")
    assert len(world.invokes.calls) == 1


def test_a_rebalance_then_a_spot_warning_escalates_to_a_drain(world: World) -> None:
    iid = world.add_node("n1")
    world.add_pod("web-1", "n1")
    assert world.run(event_for("rebalance-recommendation", iid)) == {"batchItemFailures": []}
    assert world.run(event_for("spot-interruption-warning", iid)) == {"batchItemFailures": []}
    assert world.node("n1") is None and world.state(iid) in ("shutting-down", "terminated")
    assert len(world.invokes.calls) == 2  # the spot warning asks again: the node now leaves for sure


def test_kubernetes_api_failures_are_returned_for_retry(world: World) -> None:
    iid = world.add_node("n1")
    world.kube.inject_error("/api/v1/nodes/n1", 500, count=100, method="PATCH")
    other = world.add_node("n2", owned=False)

    response = world.run(event_for("spot-interruption-warning", iid), event_for("rebalance-recommendation", other),
                         message_ids=["fails", "works"])

    assert response == {"batchItemFailures": [{"itemIdentifier": "fails"}]}
    assert taints(world, "n2") == {(DISRUPTED, "PreferNoSchedule")}
    assert metric(world, "InterruptionOutcomes", Kind="spotInterruption", Outcome="failed") == 1


def test_a_failed_replacement_request_is_retried_and_the_node_stays_cordoned(world: World) -> None:
    iid = world.add_node("n1", owned=False)
    world.add_pod("web-1", "n1")
    body = event_for("spot-interruption-warning", iid)
    world.invokes.fail_with = "ResourceNotFoundException"

    assert world.run(body, message_ids=["m"]) == {"batchItemFailures": [{"itemIdentifier": "m"}]}
    assert cordoned(world, "n1") and REPLACEMENT_REQUESTED_ANNOTATION not in annotations(world, "n1")

    world.invokes.fail_with = None
    assert world.run(body, message_ids=["m"]) == {"batchItemFailures": []}
    assert REPLACEMENT_REQUESTED_ANNOTATION in annotations(world, "n1")
    assert [c["Payload"]["nodes"] for c in world.invokes.calls] == [["n1"], ["n1"], ["n1"]]  # 2 refused, 1 sent


# ----- configuration -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("settings", "sample", "expect"), [
    ({"rebalance": "ignore"}, "rebalance-recommendation", "untouched"),
    ({"rebalance": "drain"}, "rebalance-recommendation", "drained"),
    ({"spot_interruption": "ignore"}, "spot-interruption-warning", "untouched"),
    ({"scheduled_change": "taint"}, "health-scheduled-change", "tainted"),
])
def test_actions_follow_the_configuration(aws: None, kube_api: Any, settings: dict[str, str], sample: str,
                                          expect: str) -> None:
    world = World.create(kube_api, demo_config(**settings))
    iid = world.add_node("n1")
    world.add_pod("web-1", "n1")
    assert world.run(event_for(sample, iid)) == {"batchItemFailures": []}
    if expect == "untouched":
        assert taints(world, "n1") == set() and world.invokes.calls == []
    elif expect == "tainted":
        assert taints(world, "n1") == {(DISRUPTED, "PreferNoSchedule")} and world.pods_on("n1") == ["default/web-1"]
    else:
        assert world.node("n1") is None and world.pods_on("n1") == []
