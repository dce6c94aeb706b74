"""Every sample event is classified; malformed and unknown ones are reported, not crashed on."""

from __future__ import annotations

import json

import pytest

from autoscaler.domain.interruption import (
    Action,
    EventKind,
    Ignored,
    InterruptionEvent,
    MalformedEvent,
    action_for,
    drain_deadline,
    parse_event,
)
from tests.events import load_event


@pytest.mark.parametrize(
    ("name", "kind", "instances", "deadline_offset"),
    [
        ("spot-interruption-warning", EventKind.SPOT_INTERRUPTION, ("i-1234567890abcdef0",), 120.0),
        ("rebalance-recommendation", EventKind.REBALANCE, ("i-1234567890abcdef0",), None),
        ("state-change-terminated", EventKind.STATE_CHANGE, ("i-1234567890abcdef0",), 0.0),
        ("health-scheduled-change", EventKind.SCHEDULED_CHANGE,
         ("i-1234567890abcdef0", "i-0fedcba0987654321"), 14 * 86400 - 3 * 3600),
    ],
)
def test_sample_events_are_classified(name: str, kind: EventKind, instances: tuple[str, ...],
                                      deadline_offset: float | None) -> None:
    event = parse_event(json.dumps(load_event(name)))
    assert isinstance(event, InterruptionEvent)
    assert event.kind is kind
    assert event.instance_ids == instances
    if deadline_offset is None:
        assert event.deadline is None
    else:
        assert event.deadline == pytest.approx(event.time + deadline_offset)


@pytest.mark.parametrize(("name", "why"), [("state-change-running", "needs no action"),
                                           ("health-other-service", "not an EC2 scheduled change")])
def test_events_needing_nothing_are_ignored(name: str, why: str) -> None:
    result = parse_event(load_event(name))
    assert isinstance(result, Ignored)
    assert why in result.reason


def test_unknown_detail_type_is_ignored_not_an_error() -> None:
    event = {**load_event("rebalance-recommendation"), "detail-type": "EC2 AMI State Change"}
    result = parse_event(event)
    assert isinstance(result, Ignored)
    assert "unknown event" in result.reason


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "not a JSON object"),
        (json.dumps({"id": "x", "source": "aws.ec2"}), "detail-type"),
        (json.dumps({**load_event("spot-interruption-warning"), "detail": {"instance-id": 42}}), "instance-id"),
        (json.dumps({**load_event("state-change-terminated"), "detail": {"instance-id": "i-1"}}), "detail.state"),
    ],
)
def test_malformed_messages_name_the_problem(body: str, message: str) -> None:
    with pytest.raises(MalformedEvent, match=message):
        parse_event(body)


def test_actions_default_and_configured() -> None:
    assert action_for(EventKind.REBALANCE) is Action.TAINT
    assert action_for(EventKind.REBALANCE, {"rebalance": "drain"}) is Action.DRAIN
    assert action_for(EventKind.SPOT_INTERRUPTION, {"rebalance": "ignore"}) is Action.DRAIN
    with pytest.raises(ValueError, match="sometimes"):
        action_for(EventKind.REBALANCE, {"rebalance": "sometimes"})


def test_late_messages_still_get_a_drain_window() -> None:
    event = parse_event(load_event("spot-interruption-warning"))
    assert isinstance(event, InterruptionEvent)
    assert drain_deadline(event, now=event.time + 10) == event.time + 120
    assert drain_deadline(event, now=event.time + 500, fallback_seconds=30) == event.time + 530
