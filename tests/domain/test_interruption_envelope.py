"""The interruption envelope (issue 18 items 3 and 4): only the fields the handler uses are required,
and nothing but ``MalformedEvent`` ever escapes the parser, over named cases and a fuzz run."""

from __future__ import annotations

import json
from collections import Counter
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
from tests.events.mutate import mutated_events


def _without(event: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in event.items() if k not in keys}


# ----- item 3: fields the handler never uses are optional ---------------------------------------------
def test_the_aws_docs_state_change_example_without_version_is_read() -> None:
    parsed = parse_event(json.dumps(_without(load_event("state-change-terminated"), "version")))
    assert isinstance(parsed, InterruptionEvent) and parsed.kind is EventKind.STATE_CHANGE


@pytest.mark.parametrize("resources", ["absent", None, "arn:aws:ec2:us-east-1:1:instance/i-1", [7, None]])
def test_a_health_event_without_usable_resources_still_names_its_instances(resources: Any) -> None:
    event = _without(load_event("health-scheduled-change"), "resources")
    if resources != "absent":
        event["resources"] = resources
    parsed = parse_event(json.dumps(event))
    assert isinstance(parsed, InterruptionEvent)
    assert parsed.instance_ids and all(i.startswith("i-") for i in parsed.instance_ids)


@pytest.mark.parametrize("missing", ["id", "time", "region", "version"])
def test_each_unused_field_may_be_missing(missing: str) -> None:
    parsed = parse_event(json.dumps(_without(load_event("spot-interruption-warning"), missing)))
    assert isinstance(parsed, InterruptionEvent) and parsed.instance_ids


def test_a_spot_warning_without_id_time_region_resources_still_drains_with_a_fallback_deadline() -> None:
    parsed = parse_event(json.dumps(_without(load_event("spot-interruption-warning"),
                                             "version", "id", "time", "region", "resources", "account")))
    assert isinstance(parsed, InterruptionEvent) and parsed.kind is EventKind.SPOT_INTERRUPTION
    assert parsed.time is None and parsed.deadline is None  # drain_deadline falls back to now + 120 s


def test_the_fields_the_handler_uses_are_still_required_and_named() -> None:
    with pytest.raises(MalformedEvent, match="detail-type"):
        parse_event(json.dumps(_without(load_event("spot-interruption-warning"), "detail-type")))
    with pytest.raises(MalformedEvent, match="detail"):
        parse_event(json.dumps(_without(load_event("spot-interruption-warning"), "detail")))


# ----- item 4: nothing but MalformedEvent escapes -----------------------------------------------------
@pytest.mark.parametrize(("body", "says"), [
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    (json.dumps({**load_event("health-scheduled-change"),
                 "detail": {**load_event("health-scheduled-change")["detail"], "affectedEntities": 7}}),
     "affectedEntities is int"),
])
def test_surprising_messages_raise_malformed_naming_the_problem(body: str, says: str) -> None:
    with pytest.raises(MalformedEvent, match=says):
        parse_event(body)


@pytest.mark.parametrize("when", ["9999-12-31T23:59:59+14:00", "0001-01-01T00:00:00-14:00", "yesterday", 12,
                                  "2024-02-30T00:00:00Z"])
def test_odd_times_never_escape_as_value_or_overflow_errors(when: Any) -> None:
    event = {**load_event("spot-interruption-warning"), "time": when}
    parsed = parse_event(json.dumps(event))
    assert isinstance(parsed, InterruptionEvent)


@pytest.mark.parametrize("start", ["Mon, 99 Foo 2023 99:99:99 GMT", "", 5])
def test_odd_health_start_times_mean_no_deadline(start: Any) -> None:
    event = load_event("health-scheduled-change")
    event["detail"]["startTime"] = start
    parsed = parse_event(json.dumps(event))
    assert isinstance(parsed, InterruptionEvent) and parsed.deadline is None


def test_fuzz_two_thousand_mutated_events_only_ever_parse_or_raise_malformed() -> None:
    # The 10,000-event run is benchmarks/interruption_fuzz.py (through the handler); this is its fast part.
    outcomes: Counter[str] = Counter()
    for body in mutated_events(2000, seed=1818):
        try:
            parsed = parse_event(body)
        except MalformedEvent as exc:
            outcomes["malformed" if str(exc) else "malformed without a message"] += 1
        else:
            assert isinstance(parsed, InterruptionEvent | LaunchHook | Ignored)
            outcomes["read"] += 1
    assert outcomes["malformed without a message"] == 0
    assert outcomes["malformed"] > 500 and outcomes["read"] > 500  # the mutations reach both sides


@pytest.mark.parametrize(("field", "value"), [("LifecycleActionToken", "short"), ("EC2InstanceId", "i-" + "0" * 30),
                                              ("LifecycleHookName", ""), ("AutoScalingGroupName", "x" * 300)])
def test_a_lifecycle_action_auto_scaling_could_never_complete_is_malformed(field: str, value: str) -> None:
    # Found by the fuzz run: such a value failed in the SDK's parameter validation on every retry (DLQ).
    event = load_event("asg-terminate-lifecycle-action")
    event["detail"][field] = value
    with pytest.raises(MalformedEvent, match=field):
        parse_event(json.dumps(event))
