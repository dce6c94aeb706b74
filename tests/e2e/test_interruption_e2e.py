"""End to end: the four EventBridge rules the stack creates (the same pattern data, ``infra.event_patterns``)
on a moto event bus, targeting a moto SQS queue; the sample events are put on the bus, received from the
queue and processed by the real interruption handler against moto EC2 and the Kubernetes API emulator."""

from __future__ import annotations

import json
from typing import Any

import pytest

from infra.event_patterns import EVENT_PATTERNS
from tests.handlers.interruption_world import REGION, World, event_for

pytestmark = pytest.mark.e2e


def _plumbing(world: World) -> str:
    """The stack's queue and rules in moto; returns the queue URL."""
    sqs, events = world.rt.client("sqs"), world.rt.client("events")
    url = str(sqs.create_queue(QueueName="interruption")["QueueUrl"])
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    for kind, pattern in EVENT_PATTERNS.items():
        events.put_rule(Name=f"interruption-{kind}", EventPattern=json.dumps(pattern), State="ENABLED")
        events.put_targets(Rule=f"interruption-{kind}", Targets=[{"Id": "queue", "Arn": arn}])
    return url


def _put(world: World, event: dict[str, Any]) -> None:
    resp = world.rt.client("events").put_events(Entries=[{
        "Source": event["source"], "DetailType": event["detail-type"], "Detail": json.dumps(event["detail"]),
        "Resources": event.get("resources", [])}])
    assert resp["FailedEntryCount"] == 0, resp


def _receive_all(world: World, url: str) -> list[dict[str, Any]]:
    sqs, out = world.rt.client("sqs"), []
    while True:
        msgs = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0,
                                   AttributeNames=["All"]).get("Messages", [])
        if not msgs:
            return out
        out.extend(msgs)


def _as_lambda_records(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """What the Lambda SQS event source hands the function for these messages."""
    return {"Records": [{
        "messageId": m["MessageId"], "receiptHandle": m["ReceiptHandle"], "body": m["Body"],
        "attributes": m.get("Attributes", {}), "messageAttributes": {}, "md5OfBody": m["MD5OfBody"],
        "eventSource": "aws:sqs", "eventSourceArn": f"arn:aws:sqs:{REGION}:123456789012:interruption",
        "awsRegion": REGION} for m in messages]}


def test_events_flow_from_the_bus_through_the_queue_to_the_handler(world: World) -> None:
    from autoscaler.handlers.interruption import handler
    from simulator.local import LambdaContext

    url = _plumbing(world)
    spot, rebalance = world.add_node("spot"), world.add_node("rebalance")
    ours, theirs = world.add_node("ours", capacity_type="on-demand"), world.add_node("theirs", owned=False)
    gone = world.add_node("gone")
    for node in ("spot", "rebalance", "ours", "theirs", "gone"):
        world.add_pod(f"app-{node}", node)

    for event in (event_for("spot-interruption-warning", spot),
                  event_for("rebalance-recommendation", rebalance),
                  event_for("health-scheduled-change", ours, theirs),
                  event_for("state-change-terminated", gone),
                  event_for("state-change-running", spot),  # filtered out by the rule's states
                  event_for("health-other-service")):  # filtered out: not EC2
        _put(world, event)

    messages = _receive_all(world, url)
    kinds = sorted(json.loads(m["Body"])["detail-type"] for m in messages)
    assert kinds == ["AWS Health Event", "EC2 Instance Rebalance Recommendation",
                     "EC2 Instance State-change Notification", "EC2 Spot Instance Interruption Warning"]

    response = handler(_as_lambda_records(messages), LambdaContext(function_name="interruption"))

    assert response == {"batchItemFailures": []}
    assert world.node("spot") is None and world.state(spot) in ("shutting-down", "terminated")
    rebalanced = world.node("rebalance")
    assert rebalanced is not None and not rebalanced["spec"].get("unschedulable")
    assert world.node("ours") is None and world.state(ours) in ("shutting-down", "terminated")
    kept = world.node("theirs")
    assert kept is not None and kept["spec"]["unschedulable"] and world.state(theirs) == "running"
    assert world.node("gone") is None
    assert {p["source"] for p in world.invokes.payloads} == {"interruption"}
    # Every node that leaves asks for replacement capacity, the terminated one too (its pods need a home).
    assert sorted(n for p in world.invokes.payloads for n in p["nodes"]) == [
        "gone", "ours", "rebalance", "spot", "theirs"]

    # The event source then deletes what the function acknowledged: nothing is left to redrive.
    sqs = world.rt.client("sqs")
    for m in messages:
        sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages",
                                                                   "ApproximateNumberOfMessagesNotVisible"])
    assert set(attrs["Attributes"].values()) == {"0"}
