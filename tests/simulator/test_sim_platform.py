"""The simulated platform around the handlers, without AWS: duplicate-launch classification, the
interruption queue's Lambda trigger (batches, partial failures, DLQ) and the HPA (simulator/sim/)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from autoscaler.domain.interruption import EventKind, InterruptionEvent, parse_event
from simulator.ec2_instance import ec2_instance
from simulator.kube_store import Store
from simulator.sim.cloud import CloudWorld, InstanceRecord
from simulator.sim.controllers import Controllers, Deployment
from simulator.sim.engine import EventLoop, Function, VirtualClock
from simulator.sim.hpa import Autoscalers, Hpa
from simulator.sim.interruption import InterruptionQueue, rule_for
from tests.events import load_event


def _record(iid: str, *, pods: str = "", claim: str = "", at: float = 0.0, call: int | None = None,
            claimed: str = "") -> InstanceRecord:
    """An instance as the simulated EC2 records it: ``pods`` in its tags, ``claimed`` only in the claims
    table; ``call`` is the CreateFleet call that launched it (its own by default)."""
    tags = [{"Key": "karpenter.sh/nodepool", "Value": "default"}]
    if pods:
        tags.append({"Key": "eks-serverless-autoscaler/pods-1", "Value": pods})
    if claim:
        tags.append({"Key": "karpenter.sh/nodeclaim", "Value": claim})
    return InstanceRecord(iid, at, instance=ec2_instance({
        "InstanceId": iid, "InstanceType": "m5.xlarge", "Placement": {"AvailabilityZone": "us-east-1a"},
        "InstanceLifecycle": "spot", "Tags": tags}), call=call if call is not None else int(iid.split("-")[1]),
        pods=frozenset(pods.split()) | frozenset(claimed.split()))


def test_duplicate_launch_classification() -> None:
    cloud = CloudWorld(EventLoop(epoch=0.0), "us-east-1")
    first = _record("i-1", pods="default/a default/b", claim="c-1")
    cloud.instances["i-1"] = first
    # A launch for a pod a live instance was launched for: duplicate
    assert cloud._duplicated(_record("i-2", pods="default/b", claim="c-2")) == "i-1"
    # The same node claim twice: duplicate
    assert cloud._duplicated(_record("i-3", claim="c-1")) == "i-1"
    # Other pods: no duplicate
    assert cloud._duplicated(_record("i-4", pods="default/z", claim="c-4")) is None
    # A sibling of one grouped CreateFleet call (the group's claim tag, its own pods in the claims table):
    # not a duplicate; a pod its claim names that a live instance was launched for: duplicate
    assert cloud._duplicated(_record("i-6", claim="c-1", call=1, claimed="default/y")) is None
    assert cloud._duplicated(_record("i-7", claim="c-7", claimed="default/a")) == "i-1"
    # The first instance is gone or leaving: a replacement, not a duplicate
    first.terminated_at = 10.0
    assert cloud._duplicated(_record("i-5", pods="default/a")) is None
    first.terminated_at = None
    first.interrupted = True
    assert cloud._duplicated(_record("i-6", pods="default/a")) is None
    first.interrupted = False
    # A pod sitting on a leaving node is being replaced, whatever the tags say
    cloud.displaced = lambda pod: pod == "default/a"
    assert cloud._duplicated(_record("i-7", pods="default/a")) is None


def _queue(responses: list[Any]) -> tuple[EventLoop, CloudWorld, InterruptionQueue, list[dict[str, Any]]]:
    loop = EventLoop(epoch=1_700_000_000.0)
    cloud = CloudWorld(loop, "us-east-1")
    seen: list[dict[str, Any]] = []

    def invoke(event: dict[str, Any]) -> dict[str, Any]:
        seen.append(event)
        answer = responses.pop(0) if responses else {"batchItemFailures": []}
        if isinstance(answer, Exception):
            raise answer
        return dict(answer)

    queue = InterruptionQueue(loop, cloud, invoke, "us-east-1", batch_size=2, max_receive_count=3)
    for i in range(3):
        cloud.instances[_iid(i)] = _record(_iid(i))
    return loop, cloud, queue, seen


def _iid(n: int) -> str:
    """An instance id in EC2's format (the interruption parser refuses any other)."""
    return f"i-{n:017x}"


def test_interruption_warnings_reach_the_handler_in_batches() -> None:
    # Given three spot instances interrupted at once and a trigger with batch size 2
    loop, _, queue, seen = _queue([])
    ids = queue.interrupt(count=3)
    # When a second passes (the queue's delivery)
    loop.run_until(5)
    # Then the handler got a batch of 2 then 1, each record the EventBridge event as its body
    assert [len(e["Records"]) for e in seen] == [2, 1]
    bodies = [json.loads(r["body"]) for e in seen for r in e["Records"]]
    assert [b["detail"]["instance-id"] for b in bodies] == ids
    assert {b["detail-type"] for b in bodies} == {"EC2 Spot Instance Interruption Warning"}
    assert seen[0]["Records"][0]["eventSourceARN"].startswith("arn:aws:sqs:us-east-1:")
    assert queue.outcomes == {"handled": 3}


def test_the_event_source_runs_five_batches_at_once_then_scales_up_to_its_maximum_concurrency() -> None:
    # Given 20 spot instances interrupted at once, batches of 2, an event source capped at 7 concurrent
    # batches (the stack's maxConcurrency), and an unreserved function whose every invocation takes 10 s
    loop, cloud, queue, _ = _queue([])
    loop.functions = {"interruption": Function(concurrency=None)}
    queue.max_concurrency = 7
    for i in range(3, 20):
        cloud.instances[f"i-{i}"] = _record(f"i-{i}")
    starts: list[float] = []

    def invoke(event: dict[str, Any]) -> dict[str, Any]:
        starts.append(round(loop.now, 1))
        loop.sleep(10)
        return {"batchItemFailures": []}

    queue.invoke = invoke
    queue.interrupt(count=20)
    # When the messages become visible (1 s) and the batches run
    loop.run_until(60)
    # Then five batches start at once, one more every 0.2 s (300 a minute) while messages wait, up to 7;
    # the last three start as the first ones end, and every message is handled
    assert starts == [1.0] * 5 + [1.2, 1.4] + [11.0] * 3
    assert max(sum(1 for i in loop.invocations if i.started <= s < i.ended) for s in starts) == 7
    assert queue.outcomes == {"handled": 20}


def test_concurrent_batches_each_answer_for_their_own_messages() -> None:
    # Given three instances interrupted at once, batches of one, and invocations that take 30 s each,
    # the one holding the second message returning it for retry
    loop, _, queue, _ = _queue([])
    loop.functions = {"interruption": Function(concurrency=None)}
    seen: list[tuple[float, str, int]] = []

    def invoke(event: dict[str, Any]) -> dict[str, Any]:
        record = event["Records"][0]
        seen.append((round(loop.now, 1), record["messageId"], int(record["attributes"]["ApproximateReceiveCount"])))
        loop.sleep(30)
        failed = record["messageId"] == "msg-3" and record["attributes"]["ApproximateReceiveCount"] == "1"
        return {"batchItemFailures": [{"itemIdentifier": record["messageId"]}] if failed else []}

    queue.batch_size, queue.invoke = 1, invoke
    queue.interrupt(count=3)
    # When the batches run
    loop.run_until(100)
    # Then all three ran at once; only the returned message came back, 10 s after its own invocation
    # ended (the others' success did not acknowledge it, its failure did not return them)
    assert seen == [(1.0, "msg-1", 1), (1.0, "msg-3", 1), (1.0, "msg-5", 1), (41.0, "msg-3", 2)]
    assert queue.outcomes == {"handled": 3, "retried": 1} and queue.messages == []


def test_failed_messages_come_back_and_end_in_the_dlq() -> None:
    # Given a handler that returns the message for retry every time
    loop, _, queue, _ = _queue([])
    queue.invoke = lambda event: {"batchItemFailures": [{"itemIdentifier": r["messageId"]}
                                                        for r in event["Records"]]}
    queue.interrupt(count=1)
    # When the retries run (10 s retry visibility each)
    loop.run_until(60)
    # Then it was received max_receive_count times and moved to the dead-letter queue
    assert len(queue.dead_letters) == 1 and queue.dead_letters[0].receive_count == 3
    assert queue.messages == []


def test_a_failed_invocation_returns_the_batch_after_the_visibility_timeout() -> None:
    loop, _, queue, seen = _queue([RuntimeError("boom")])
    queue.interrupt(count=1)
    loop.run_until(100)
    assert len(seen) == 1  # not before the 130 s visibility timeout
    loop.run_until(119)  # the reclaim at 120 s is not part of this test
    assert len(seen) == 1
    assert queue.messages[0].receive_count == 1


def test_rebalance_recommendations_are_no_interruption() -> None:
    loop, cloud, queue, seen = _queue([])
    queue.interrupt(count=1, rebalance=True)
    loop.run_until(200)
    body = json.loads(seen[0]["Records"][0]["body"])
    assert body["detail-type"] == "EC2 Instance Rebalance Recommendation"
    assert not any(r.interrupted for r in cloud.instances.values())
    assert all(r.alive for r in cloud.instances.values())


def test_an_aws_health_scheduled_change_reaches_the_handler_as_aws_sends_it() -> None:
    # Given three instances of the autoscaler, when AWS Health announces a retirement of two, 10 min ahead
    loop, cloud, queue, seen = _queue([])
    ids = queue.scheduled_change(count=2, start_in=600)
    loop.run_until(5)
    # Then one "AWS Health Event" names both; the handler's parser reads it as a scheduled change whose
    # deadline is the start time, and the stack's scheduledChange rule is the one that routed it
    assert ids == [_iid(0), _iid(1)] and len(seen) == 1
    body = json.loads(seen[0]["Records"][0]["body"])
    assert rule_for(body) == "scheduledChange"
    parsed = parse_event(body)
    assert isinstance(parsed, InterruptionEvent)
    assert parsed.kind is EventKind.SCHEDULED_CHANGE and parsed.instance_ids == (_iid(0), _iid(1))
    assert parsed.deadline == loop.epoch + 600
    # And the event has the shape of AWS's own (the fixture the handler's tests use)
    fixture = load_event("health-scheduled-change")
    assert set(body) == set(fixture) and set(body["detail"]) == set(fixture["detail"])
    # When the change starts with one of them already gone, EC2 retires the other
    cloud.instances[_iid(0)].terminated_at = 300.0
    retired: list[list[str]] = []
    cloud.terminate = lambda ids, interrupted=False: retired.append(ids)  # type: ignore[method-assign]
    loop.run_until(700)
    assert retired == [[_iid(1)]]
    assert queue.scheduled_outcomes() == {"named": 2, "movedBeforeStart": 1, "retiredByEc2": 1, "unroutedEvents": 0}


@pytest.mark.parametrize(("event", "rule"), [
    ("health-scheduled-change", "scheduledChange"),
    ("health-other-service", None),
    ("spot-interruption-warning", "spotInterruption"),
    ("rebalance-recommendation", "rebalance"),
    ("state-change-terminated", "stateChange"),
    ("state-change-running", None),
])
def test_only_events_a_rule_of_the_stack_matches_reach_the_queue(event: str, rule: str | None) -> None:
    # Given an EventBridge event as AWS sends it, when the stack's patterns are applied
    # Then the rule that routes it is the stack's (or none: EventBridge drops it)
    assert rule_for(load_event(event)) == rule


def test_an_event_no_rule_matches_is_dropped() -> None:
    # Given the queue, when an event of another AWS Health service arrives
    loop, _, queue, seen = _queue([])
    queue._send(load_event("health-other-service"))
    loop.run_until(5)
    # Then the handler never sees it
    assert seen == [] and queue.unrouted == 1


def test_hpa_scales_on_cpu_and_waits_before_scaling_in() -> None:
    # Given nginx (500m) with an HPA at 50 % and 2 cores of load on its one Ready pod
    loop = EventLoop(epoch=0.0)
    store = Store()
    store.clock = VirtualClock(loop).now
    controllers = Controllers(loop, store)
    template = {"metadata": {"labels": {"app": "nginx"}},
                "spec": {"containers": [{"name": "n", "resources": {"requests": {"cpu": "500m"}}}]}}
    controllers.apply_deployment(Deployment("nginx", "default", 1, template))
    hpas = Autoscalers(loop, controllers)
    hpas.add(Hpa("nginx", max_replicas=20, target_cpu_utilization=50))
    hpas.set_load("default", "nginx", 2.0)

    def ready_all() -> None:
        for p in store.objects("pods"):
            if not p["metadata"].get("deletionTimestamp"):
                store.set_pod_ready("default", p["metadata"]["name"])

    loop.every(1, "kubelet", ready_all)
    loop.observer = lambda: None
    # When the HPA syncs: 2 cores / (0.5 x 50 %) = 8 replicas, at most +4 (or double) per sync
    loop.run_until(15.5)
    assert controllers.deployments[("default", "nginx")].replicas == 5
    loop.run_until(30.5)
    assert controllers.deployments[("default", "nginx")].replicas == 8
    # When the load drops, the replicas stay for the 5-minute window, then go down to the minimum
    hpas.set_load("default", "nginx", 0.1)
    loop.run_until(200)
    assert controllers.deployments[("default", "nginx")].replicas == 8
    loop.run_until(400)
    assert controllers.deployments[("default", "nginx")].replicas == 1


def test_a_generated_pod_name_already_taken_is_retried_under_another() -> None:
    # Given a pod already holding the name the Deployment controller generates first
    import hashlib

    loop = EventLoop(epoch=0.0)
    store = Store()
    store.clock = VirtualClock(loop).now
    controllers = Controllers(loop, store)
    template = {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c"}]}}
    dep = Deployment("web", "default", 2, template)
    taken = f"{dep.rs_name}-" + hashlib.sha256(f"{dep.rs_name}-1".encode()).hexdigest()[:5]
    store.create("pods", {"metadata": {"name": taken, "namespace": "default"}, "spec": {"containers": []}})
    # When the Deployment is applied and reconciled
    controllers.apply_deployment(dep)
    loop.run_until(5)
    # Then both replicas exist under fresh names, as after the API server's AlreadyExists and a retry
    owned = [p for p in store.objects("pods") if p["metadata"].get("ownerReferences")]
    assert len(owned) == 2 and taken not in {p["metadata"]["name"] for p in owned}
