"""Issue 33 items 16 and 18: interruption messages as AWS and NTH's deployments deliver them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from autoscaler.domain.interruption import (
    EventKind,
    Ignored,
    InterruptionEvent,
    LaunchHook,
    MalformedEvent,
    parse_event,
)
from tests.events import load_event


def _direct(detail_type: str) -> dict[str, Any]:
    """What Auto Scaling sends when a lifecycle hook's notification target is the SQS queue itself."""
    detail = load_event(detail_type)["detail"]
    return {"Origin": detail["Origin"], "Destination": detail["Destination"], "Service": "AWS Auto Scaling",
            "Time": "2024-05-01T12:00:00.123Z", "AccountId": "123456789012",
            "RequestId": "0c7e5f5a-1111-2222-3333-444455556666", **{k: v for k, v in detail.items()
                                                                   if k not in ("Origin", "Destination")}}


def _sns(message: dict[str, Any]) -> dict[str, Any]:
    """The envelope SNS wraps around a message it delivers to an SQS subscription (raw delivery off)."""
    return {"Type": "Notification", "MessageId": "5b9a2c1e-aaaa-bbbb-cccc-ddddeeeeffff",
            "TopicArn": "arn:aws:sns:us-west-2:123456789012:asg-lifecycle", "Subject": "Auto Scaling: Lifecycle action",
            "Message": json.dumps(message), "Timestamp": "2024-05-01T12:00:00.200Z", "SignatureVersion": "1"}


@pytest.mark.parametrize("shape", ["direct", "sns-direct", "sns-eventbridge"])
def test_item18_asg_terminate_lifecycle_notifications_in_every_shape_are_drained(shape: str) -> None:
    eventbridge = load_event("asg-terminate-lifecycle-action")
    body = {"direct": lambda: _direct("asg-terminate-lifecycle-action"),
            "sns-direct": lambda: _sns(_direct("asg-terminate-lifecycle-action")),
            "sns-eventbridge": lambda: _sns(eventbridge)}[shape]()
    event = parse_event(json.dumps(body))
    assert isinstance(event, InterruptionEvent), event
    assert event.kind is EventKind.ASG_LIFECYCLE and event.instance_ids == ("i-1234567890abcdef0",)
    assert event.lifecycle is not None
    assert (event.lifecycle.group, event.lifecycle.hook, event.lifecycle.token) == (
        "eks-workers", "drain-before-terminate", "87654321-4321-4321-4321-210987654321")


def test_item18_asg_launch_notification_sent_straight_to_sqs_is_a_launch_hook() -> None:
    event = parse_event(json.dumps(_direct("asg-launch-lifecycle-action")))
    assert isinstance(event, LaunchHook), event


@pytest.mark.parametrize("wrap", [False, True])
def test_item18_the_test_notification_auto_scaling_sends_first_is_ignored(wrap: bool) -> None:
    test = {"AccountId": "123456789012", "RequestId": "r-1", "AutoScalingGroupARN": "arn:aws:autoscaling:x",
            "AutoScalingGroupName": "eks-workers", "Service": "AWS Auto Scaling",
            "Event": "autoscaling:TEST_NOTIFICATION", "Time": "2024-05-01T12:00:00.123Z"}
    event = parse_event(json.dumps(_sns(test) if wrap else test))
    assert isinstance(event, Ignored) and "test notification" in event.reason


@pytest.mark.parametrize("bad", ["i-" + "0" * 1_000_000, "i-12345", "i-1234567890ABCDEF0", "i-1234567890abcdef0x",
                                 "i-zzzzzzzz"])
def test_item16_instance_ids_are_validated_by_ec2s_format(bad: str) -> None:
    body = load_event("spot-interruption-warning")
    body["detail"]["instance-id"] = bad
    with pytest.raises(MalformedEvent) as exc:
        parse_event(json.dumps(body))
    assert len(str(exc.value)) < 300  # the message names the problem, never echoes a megabyte


@pytest.mark.parametrize("good", ["i-1234567890abcdef0", "i-12345678"])
def test_item16_both_ec2_id_lengths_are_accepted(good: str) -> None:
    body = load_event("spot-interruption-warning")
    body["detail"]["instance-id"] = good
    assert isinstance(parse_event(json.dumps(body)), InterruptionEvent)
