"""Interruption events: what EventBridge delivered, what kind of disruption it announces, and what
to do about it.

Messages are parsed by a registry keyed by (source, detail-type), as Karpenter does; anything not
in the registry is ``Ignored`` (acknowledged, counted, never retried). The envelope requires only what
the handler uses (``source``, ``detail-type``, ``detail``): the AWS documentation's own samples leave out
``version``, and AWS Health marks ``resources`` optional. Whatever else is wrong with a message (not
JSON, nested too deep, odd times, fields of the wrong type) raises ``MalformedEvent`` naming what was
wrong, never another exception: the handler logs it with the message id and acknowledges it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

SPOT_WARNING_SECONDS = 120  # EC2 reclaims a spot instance two minutes after the warning


class EventKind(StrEnum):
    SPOT_INTERRUPTION = "spotInterruption"
    REBALANCE = "rebalance"
    SCHEDULED_CHANGE = "scheduledChange"
    STATE_CHANGE = "stateChange"
    ASG_LIFECYCLE = "asgLifecycle"  # an Auto Scaling group's terminate lifecycle hook (NTH's ASG path)


class Action(StrEnum):
    """What the interruption Lambda does to the affected node."""

    DRAIN = "drain"  # taint NoSchedule + cordon, request replacement, drain, terminate if ours
    TAINT = "taint"  # taint PreferNoSchedule and request replacement, no drain (rebalance default)
    IGNORE = "ignore"


DEFAULT_ACTIONS: Mapping[EventKind, Action] = {
    EventKind.SPOT_INTERRUPTION: Action.DRAIN,
    EventKind.REBALANCE: Action.TAINT,
    EventKind.SCHEDULED_CHANGE: Action.DRAIN,
    EventKind.STATE_CHANGE: Action.DRAIN,
    EventKind.ASG_LIFECYCLE: Action.DRAIN,
}

# States in which the instance is going away or gone; others (pending, running) need nothing.
STOPPING_STATES = frozenset({"stopping", "stopped", "shutting-down", "terminated"})


class MalformedEvent(ValueError):
    """The message is not an EventBridge event we can read; the text names the problem."""


class _Envelope(BaseModel):
    """The EventBridge envelope: only ``source``, ``detail-type`` and ``detail`` are required (the
    registry needs the first two, every parser the third). ``id`` and ``time`` are read when present;
    ``version``, ``account`` and ``region`` are never used, so never checked."""

    model_config = ConfigDict(populate_by_name=True, extra="allow")

    id: str = ""
    source: str
    detail_type: str = Field(alias="detail-type")
    time: Any = None
    resources: Any = None
    detail: dict[str, Any]

    @property
    def epoch(self) -> float | None:
        """The event's time in epoch seconds, or None when absent or unreadable (a deadline then falls
        back to a window from the moment the message is handled)."""
        return _epoch(self.time)

    @property
    def resource_ids(self) -> list[str]:
        """The instance ids named in ``resources`` (ARNs ending in ``/i-...``); anything else is skipped."""
        if not isinstance(self.resources, list):
            return []
        tails = [r.rsplit("/", 1)[-1] for r in self.resources if isinstance(r, str)]
        return [t for t in tails if is_instance_id(t)]


def _epoch(value: Any) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        return parsed.timestamp()
    except (ValueError, OverflowError, OSError):
        return None


@dataclass(frozen=True, slots=True)
class LifecycleAction:
    """The Auto Scaling lifecycle action an ``asgLifecycle`` event waits on: completed (``CONTINUE``)
    once the node is drained, kept alive with heartbeats while the drain is retried."""

    group: str
    hook: str
    token: str
    instance_id: str


@dataclass(frozen=True, slots=True)
class InterruptionEvent:
    """One disruption announced for one or more instances."""

    event_id: str
    kind: EventKind
    instance_ids: tuple[str, ...]
    time: float | None  # when EventBridge saw it (epoch seconds), if the event says
    deadline: float | None  # when the capacity goes away, if known
    state: str = ""  # state-change events only
    detail_type: str = ""
    lifecycle: LifecycleAction | None = None  # asgLifecycle events only


@dataclass(frozen=True, slots=True)
class LaunchHook:
    """An Auto Scaling group waits on its launch lifecycle hook: CONTINUE once the instance is a Ready
    node (NTH's ASG launch path), so the group counts it in service only when it can take pods."""

    event_id: str
    action: LifecycleAction
    detail_type: str = ""


@dataclass(frozen=True, slots=True)
class Ignored:
    """A message we read but do not act on (another service, a state that needs nothing, ...)."""

    event_id: str
    reason: str
    detail_type: str = ""


Parsed = InterruptionEvent | LaunchHook | Ignored
_Parser = Callable[[_Envelope], Parsed]
_REGISTRY: dict[tuple[str, str], _Parser] = {}
_KIND_OF_DETAIL_TYPE: dict[str, EventKind] = {}


def _register(source: str, detail_type: str, kind: EventKind) -> Callable[[_Parser], _Parser]:
    def wrap(fn: _Parser) -> _Parser:
        _REGISTRY[(source, detail_type)] = fn
        _KIND_OF_DETAIL_TYPE[detail_type] = kind
        return fn
    return wrap


# EC2's instance id: ``i-`` and 8 (older) or 17 lowercase hex digits. Anything else names no instance, and a
# value echoed into a log line or an API filter must be bounded.
_INSTANCE_ID = re.compile(r"i-(?:[0-9a-f]{8}|[0-9a-f]{17})")


def is_instance_id(value: object) -> bool:
    return isinstance(value, str) and _INSTANCE_ID.fullmatch(value) is not None


def kind_of_detail_type(detail_type: str) -> str:
    """The event kind a registered detail-type stands for (``unknown`` for any other): how an ignored
    message is counted."""
    kind = _KIND_OF_DETAIL_TYPE.get(detail_type)
    return kind.value if kind is not None else "unknown"


def _instance_id(env: _Envelope) -> str:
    iid = env.detail.get("instance-id")
    if not is_instance_id(iid):
        raise MalformedEvent(f"event {env.id[:64]} ({env.detail_type[:64]}): detail.instance-id is missing or not "
                             "an EC2 instance id (i- and 8 or 17 hex digits)")
    assert isinstance(iid, str)
    return iid


@_register("aws.ec2", "EC2 Spot Instance Interruption Warning", EventKind.SPOT_INTERRUPTION)
def _spot(env: _Envelope) -> Parsed:
    t = env.epoch
    return InterruptionEvent(env.id, EventKind.SPOT_INTERRUPTION, (_instance_id(env),), t,
                             None if t is None else t + SPOT_WARNING_SECONDS, detail_type=env.detail_type)


@_register("aws.ec2", "EC2 Instance Rebalance Recommendation", EventKind.REBALANCE)
def _rebalance(env: _Envelope) -> Parsed:
    return InterruptionEvent(env.id, EventKind.REBALANCE, (_instance_id(env),), env.epoch, None,
                             detail_type=env.detail_type)


@_register("aws.ec2", "EC2 Instance State-change Notification", EventKind.STATE_CHANGE)
def _state_change(env: _Envelope) -> Parsed:
    state = env.detail.get("state")
    if not isinstance(state, str) or not state:
        raise MalformedEvent(f"event {env.id} ({env.detail_type}): detail.state is missing")
    iid = _instance_id(env)
    if state not in STOPPING_STATES:
        return Ignored(env.id, f"instance {iid} state {state!r} needs no action", env.detail_type)
    return InterruptionEvent(env.id, EventKind.STATE_CHANGE, (iid,), env.epoch, env.epoch,
                             state=state, detail_type=env.detail_type)


# Auto Scaling's own parameter limits for CompleteLifecycleAction: a value outside them could never be
# completed (the SDK refuses it before sending), so such an event is malformed, not worth retrying.
_LIFECYCLE_LIMITS = {"EC2InstanceId": (1, 19), "AutoScalingGroupName": (1, 255), "LifecycleHookName": (1, 255),
                     "LifecycleActionToken": (36, 36)}


def _lifecycle_field(env: _Envelope, name: str) -> str:
    value = env.detail.get(name)
    if not isinstance(value, str) or not value:
        raise MalformedEvent(f"event {env.id} ({env.detail_type}): detail.{name} is missing")
    low, high = _LIFECYCLE_LIMITS[name]
    if not low <= len(value) <= high or not value.isprintable():
        raise MalformedEvent(f"event {env.id} ({env.detail_type}): detail.{name} is not a valid value "
                             f"({low}..{high} printable characters)")
    return value


def _lifecycle_action(env: _Envelope) -> LifecycleAction:
    iid = _lifecycle_field(env, "EC2InstanceId")
    if not is_instance_id(iid):
        raise MalformedEvent(f"event {env.id[:64]} ({env.detail_type}): detail.EC2InstanceId is not an EC2 "
                             "instance id")
    return LifecycleAction(group=_lifecycle_field(env, "AutoScalingGroupName"),
                           hook=_lifecycle_field(env, "LifecycleHookName"),
                           token=_lifecycle_field(env, "LifecycleActionToken"), instance_id=iid)


@_register("aws.autoscaling", "EC2 Instance-terminate Lifecycle Action", EventKind.ASG_LIFECYCLE)
def _asg_terminate(env: _Envelope) -> Parsed:
    action = _lifecycle_action(env)
    iid = action.instance_id
    # No deadline in the event (the hook's heartbeat timeout is the group's setting): the drain gets the
    # fallback window, and heartbeats keep the instance while a retried drain goes on.
    return InterruptionEvent(env.id, EventKind.ASG_LIFECYCLE, (iid,), env.epoch, None,
                             detail_type=env.detail_type, lifecycle=action)


@_register("aws.autoscaling", "EC2 Instance-launch Lifecycle Action", EventKind.ASG_LIFECYCLE)
def _asg_launch(env: _Envelope) -> Parsed:
    return LaunchHook(env.id, _lifecycle_action(env), env.detail_type)


def _health_time(value: Any) -> float | None:
    """AWS Health writes times as RFC 2822 ("Fri, 27 Jan 2023 01:43:21 GMT"); accept ISO too."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError, OSError):
        pass
    return _epoch(value)


@_register("aws.health", "AWS Health Event", EventKind.SCHEDULED_CHANGE)
def _health(env: _Envelope) -> Parsed:
    service = env.detail.get("service")
    category = env.detail.get("eventTypeCategory")
    if service != "EC2" or category != "scheduledChange":
        return Ignored(env.id, f"AWS Health {service}/{category} is not an EC2 scheduled change", env.detail_type)
    entities = env.detail.get("affectedEntities")
    if entities is not None and not isinstance(entities, list):
        raise MalformedEvent(f"event {env.id} ({env.detail_type}): detail.affectedEntities is "
                             f"{type(entities).__name__}, not a list")
    ids = [e["entityValue"] for e in entities or () if isinstance(e, Mapping) and is_instance_id(e.get("entityValue"))]
    ids += env.resource_ids
    unique = tuple(dict.fromkeys(ids))
    if not unique:
        return Ignored(env.id, "AWS Health EC2 scheduled change names no instance", env.detail_type)
    start = _health_time(env.detail.get("startTime"))
    return InterruptionEvent(env.id, EventKind.SCHEDULED_CHANGE, unique, env.epoch, start,
                             detail_type=env.detail_type)


def parse_event(body: str | Mapping[str, Any]) -> Parsed:
    """Classify one SQS message body (an EventBridge event as JSON). Raises only ``MalformedEvent``."""
    try:
        return _parse(body)
    except MalformedEvent:
        raise
    except RecursionError as exc:
        raise MalformedEvent("message body is nested too deeply to read") from exc
    except Exception as exc:  # any other surprise in a message is still that message's fault
        raise MalformedEvent(f"message could not be read: {type(exc).__name__}: {exc}"[:500]) from exc


def _parse(body: str | Mapping[str, Any]) -> Parsed:
    if isinstance(body, str):
        try:
            raw = json.loads(body)
        except json.JSONDecodeError as exc:
            raise MalformedEvent(f"message body is not JSON: {exc.msg} at position {exc.pos}") from exc
    else:
        raw = body
    if not isinstance(raw, Mapping):
        raise MalformedEvent("message body is not a JSON object")
    raw = _unwrapped(raw)
    if raw.get("Event") == "autoscaling:TEST_NOTIFICATION":
        return Ignored(str(raw.get("RequestId") or "")[:64], "Auto Scaling's test notification for a new hook target")
    if "detail-type" not in raw and "LifecycleTransition" in raw:
        raw = _lifecycle_notification(raw)
    try:
        env = _Envelope.model_validate(raw)
    except ValidationError as exc:
        fields = ", ".join(".".join(str(p) for p in e["loc"]) or "(root)" for e in exc.errors())
        raise MalformedEvent(f"not an EventBridge event: bad or missing {fields}") from exc
    parser = _REGISTRY.get((env.source, env.detail_type))
    if parser is None:
        return Ignored(env.id, f"unknown event {env.source} / {env.detail_type}", env.detail_type)
    return parser(env)


def _unwrapped(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    """The message an SNS topic delivered to the queue (``Type: Notification``, the message as a JSON string
    in ``Message``): a lifecycle hook or an EventBridge rule may target a topic the queue subscribes to."""
    if raw.get("Type") != "Notification" or not isinstance(raw.get("Message"), str):
        return raw
    try:
        inner = json.loads(raw["Message"])
    except json.JSONDecodeError as exc:
        raise MalformedEvent(f"SNS notification's Message is not JSON: {exc.msg} at position {exc.pos}") from exc
    if not isinstance(inner, Mapping):
        raise MalformedEvent("SNS notification's Message is not a JSON object")
    return inner


_TRANSITIONS = {"autoscaling:EC2_INSTANCE_TERMINATING": "EC2 Instance-terminate Lifecycle Action",
                "autoscaling:EC2_INSTANCE_LAUNCHING": "EC2 Instance-launch Lifecycle Action"}


def _lifecycle_notification(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    """A lifecycle hook's own notification (its target the queue or a topic, not EventBridge) as the
    EventBridge event of the same action: the same fields, top level instead of under ``detail``."""
    transition = raw.get("LifecycleTransition")
    detail_type = _TRANSITIONS.get(transition) if isinstance(transition, str) else None
    if detail_type is None:
        raise MalformedEvent(f"Auto Scaling notification: LifecycleTransition {str(transition)[:64]!r} is not "
                             f"one of {sorted(_TRANSITIONS)}")
    return {"id": str(raw.get("RequestId") or ""), "source": "aws.autoscaling", "detail-type": detail_type,
            "time": raw.get("Time"), "detail": dict(raw)}


def action_for(kind: EventKind, actions: Mapping[str, str] | None = None) -> Action:
    """The configured action for an event kind (stack config ``interruption``), else the default."""
    configured = (actions or {}).get(kind.value)
    return Action(configured) if configured else DEFAULT_ACTIONS[kind]


def drain_deadline(event: InterruptionEvent, *, now: float, fallback_seconds: float = SPOT_WARNING_SECONDS) -> float:
    """When a drain must be done: the event's own deadline, or ``fallback_seconds`` from now.

    Deadlines already in the past (a late or re-delivered message) still get the fallback window,
    so the pods are evicted gracefully rather than not at all.
    """
    if event.deadline is None or event.deadline <= now:
        return now + fallback_seconds
    return event.deadline
