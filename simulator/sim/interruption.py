"""Spot interruptions, the interruption queue and its Lambda trigger, in virtual time.

``interrupt`` plays an AWS FIS ``aws:ec2:send-spot-instance-interruptions`` action: for each chosen spot
instance EC2 emits the "EC2 Spot Instance Interruption Warning" EventBridge event (the stack's rule
routes it to the interruption queue) and reclaims the instance ``notice_seconds`` (two minutes) later.
``scheduled_change`` plays AWS Health announcing an EC2 scheduled change (an instance retirement) for
chosen instances: one "AWS Health Event" naming them all, its ``startTime`` ``start_in`` seconds ahead;
at that time EC2 retires every named instance still running.

An event reaches the queue only when one of the stack's EventBridge rules matches it: the patterns are
``infra.event_patterns.EVENT_PATTERNS``, the data the CDK stack builds its rules from, matched here as
EventBridge matches them (exact values; a list in an event matches when any element does).

The queue is modelled here rather than in moto, whose visibility timeouts run on the wall clock: a
message becomes visible ``delivery_seconds`` after the event; Lambda's SQS event source mapping hands
visible messages to the real interruption handler in batches of ``batch_size``, several batches at once:
it starts with ``INITIAL_BATCHES`` (5) concurrent batches, adds one every ``SCALE_UP_SECONDS`` (300 a
minute) while visible messages wait for a free poller, up to the event source's maximum concurrency
(``interruption.maxConcurrency``, which the stack sets on the mapping), and falls back to 5 when nothing
waits (docs/simulation.md quotes the AWS documentation). Each batch is its own invocation with its own
``batchItemFailures``: messages named there come back after ``retry_visibility_seconds`` (the handler
shortens their visibility to that), a failed invocation returns its whole batch after the queue's
visibility timeout, and a message received ``max_receive_count`` times goes to the dead-letter queue.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from email.utils import format_datetime
from typing import Any

from infra.event_patterns import EVENT_PATTERNS
from simulator.sim.cloud import CloudWorld, InstanceRecord
from simulator.sim.engine import EventLoop
from simulator.sim.kubelet import BASELINE_GROUP_TAG, BASELINE_NODEPOOL_TAG

ACCOUNT = "123456789012"
QUEUE_NAME = "autoscaler-interruption"
RETIREMENT = "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED"  # the commonest EC2 scheduled change
# Lambda's SQS scaling: "Lambda starts processing five batches at a time with five concurrent invocations
# of your function. If messages are still available, Lambda increases the number of processes that are
# reading batches by up to 300 more instances per minute."
INITIAL_BATCHES = 5
SCALE_UP_SECONDS = 60.0 / 300


def matches(pattern: Mapping[str, Any], event: Mapping[str, Any]) -> bool:
    """EventBridge's matching for the patterns the stack uses: every key of the pattern is in the event;
    a list of values matches an equal value (or, for a list in the event, any element of it); a mapping
    matches the event's mapping under that key recursively."""
    for key, wanted in pattern.items():
        if key not in event:
            return False
        value = event[key]
        if isinstance(wanted, Mapping):
            if not isinstance(value, Mapping) or not matches(wanted, value):
                return False
        elif not any(v in wanted for v in (value if isinstance(value, list) else [value])):
            return False
    return True


def rule_for(event: Mapping[str, Any]) -> str | None:
    """The stack's rule (its event kind) that routes ``event`` to the interruption queue, or None."""
    return next((kind for kind, pattern in EVENT_PATTERNS.items() if matches(pattern, event)), None)


@dataclass
class ScheduledChange:
    """One AWS Health scheduled change: the instances it names and when EC2 acts on them."""

    instance_ids: list[str]
    announced_at: float
    starts_at: float
    retired: list[str] = field(default_factory=list)  # still running at the start: EC2 took them


@dataclass
class Message:
    message_id: str
    body: str
    visible_at: float
    receive_count: int = 0


@dataclass
class InterruptionQueue:
    loop: EventLoop
    cloud: CloudWorld
    invoke: Callable[[dict[str, Any]], dict[str, Any]]  # the interruption handler, through the harness
    region: str
    batch_size: int = 10
    max_concurrency: int = 10  # the event source mapping's ScalingConfig.MaximumConcurrency
    visibility_timeout_seconds: float = 130.0
    retry_visibility_seconds: float = 10.0
    max_receive_count: int = 3  # infra/interruption_queue.py MAX_RECEIVE_COUNT
    delivery_seconds: float = 1.0
    notice_seconds: float = 120.0
    log: Callable[[str, str], None] | None = None
    messages: list[Message] = field(default_factory=list)
    dead_letters: list[Message] = field(default_factory=list)
    outcomes: dict[str, int] = field(default_factory=dict)  # message outcome -> count
    scheduled: list[ScheduledChange] = field(default_factory=list)
    unrouted: int = 0  # events no rule of the stack matched (EventBridge drops them)
    _ids: Any = field(default_factory=itertools.count)
    _poll_at: float | None = None  # the earliest poll scheduled
    _in_flight: int = 0  # batches being processed by an invocation
    _pollers: int = 0  # concurrent batches the event source runs now (0: not started)
    _scaling: bool = False  # a scale-up is due

    def interrupt(self, *, count: int, node_pool: str | None = None, rebalance: bool = False,
                  pick: Callable[[InstanceRecord], bool] = lambda _: True) -> list[str]:
        """Send interruption warnings to ``count`` live spot instances (of ``node_pool`` when given) and
        reclaim them after the notice, or with ``rebalance`` only send EC2 Instance Rebalance
        Recommendations (no reclaim follows); returns the instance ids."""
        def pool_of(r: InstanceRecord) -> str:
            # The Cluster Autoscaler baseline's instances belong to the NodePool their group was made for.
            assert r.instance is not None
            return r.instance.node_pool or r.instance.tags.get(BASELINE_NODEPOOL_TAG, "")

        chosen = [r for r in sorted(self.cloud.live(), key=lambda r: r.instance_id)
                  if r.instance is not None and r.instance.capacity_type == "spot" and not r.interrupted
                  and (node_pool is None or pool_of(r) == node_pool) and pick(r)][:count]
        for record in chosen:
            assert record.instance is not None
            # The baseline's set-up has no Node Termination Handler: nothing consumes the warning, and
            # the product's queue must not get it either.
            if BASELINE_GROUP_TAG not in record.instance.tags:
                self._send(self._event(record, rebalance=rebalance))
            if not rebalance:
                record.interrupted = True
                self.loop.after(self.notice_seconds, f"EC2 reclaims {record.instance_id}",
                                lambda r=record: self._reclaim(r))  # type: ignore[misc]
        return [r.instance_id for r in chosen]

    def scheduled_change(self, *, count: int, start_in: float, node_pool: str | None = None,
                         event_type: str = RETIREMENT,
                         pick: Callable[[InstanceRecord], bool] = lambda _: True) -> list[str]:
        """AWS Health announces a scheduled change for ``count`` live instances of the autoscaler (of
        ``node_pool`` when given), starting ``start_in`` seconds from now; at the start EC2 retires (here:
        terminates) the ones still running. Returns the instance ids."""
        chosen = [r for r in sorted(self.cloud.live(), key=lambda r: r.instance_id)
                  if r.instance is not None and r.instance.node_pool and not r.interrupted
                  and (node_pool is None or r.instance.node_pool == node_pool) and pick(r)][:count]
        if not chosen:
            return []
        change = ScheduledChange([r.instance_id for r in chosen], self.loop.now, self.loop.now + start_in)
        self.scheduled.append(change)
        self._send(self._health_event(change, event_type))
        self.loop.at(change.starts_at, f"EC2 scheduled change starts ({len(chosen)} instance(s))",
                     lambda: self._retire(change))
        return change.instance_ids

    def scheduled_outcomes(self) -> dict[str, int]:
        """Per named instance: terminated before its change started (the autoscaler moved it), retired by
        EC2 at the start (it did not), or neither yet (the change starts after the run)."""
        named = [(i, c) for c in self.scheduled for i in c.instance_ids]
        moved = sum(1 for i, c in named if (t := self.cloud.instances[i].terminated_at) is not None
                    and t < c.starts_at)
        return {"named": len(named), "movedBeforeStart": moved,
                "retiredByEc2": sum(len(c.retired) for c in self.scheduled), "unroutedEvents": self.unrouted}

    def _health_event(self, change: ScheduledChange, event_type: str) -> dict[str, Any]:
        """The event as AWS Health sends it (tests/events/health-scheduled-change.json): times in RFC 2822,
        the instances both as ``resources`` and ``affectedEntities``."""
        def rfc2822(virtual: float) -> str:
            return format_datetime(self.cloud.epoch_time(virtual), usegmt=True)

        n = next(self._ids)
        return {
            "version": "0", "id": f"sim-health-{n}", "detail-type": "AWS Health Event", "source": "aws.health",
            "account": ACCOUNT, "time": self.cloud.epoch_time(self.loop.now).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "region": self.region, "resources": list(change.instance_ids),
            "detail": {
                "eventArn": f"arn:aws:health:{self.region}::event/EC2/{event_type}/{event_type}_sim{n}",
                "service": "EC2", "eventTypeCode": event_type, "eventTypeCategory": "scheduledChange",
                "eventScopeCode": "ACCOUNT_SPECIFIC", "communicationId": f"sim-{n}",
                "startTime": rfc2822(change.starts_at), "endTime": rfc2822(change.starts_at + 3600),
                "lastUpdatedTime": rfc2822(self.loop.now), "statusCode": "upcoming", "eventRegion": self.region,
                "eventDescription": [{"language": "en_US", "latestDescription":
                                      "EC2 has detected degradation of the underlying hardware hosting your "
                                      "Amazon EC2 instance. Your instance will be retired after the start time."}],
                "affectedEntities": [{"entityValue": i} for i in change.instance_ids],
                "affectedAccount": ACCOUNT, "page": "1", "totalPages": "1",
            },
        }

    def _retire(self, change: ScheduledChange) -> None:
        change.retired = [i for i in change.instance_ids if self.cloud.instances[i].alive]
        if self.log:
            self.log("ec2", f"scheduled change starts: {len(change.retired)} of {len(change.instance_ids)} "
                            "named instance(s) still running, retired now" + (
                                f" ({', '.join(change.retired)})" if change.retired else ""))
        self.cloud.terminate(change.retired)

    def _event(self, record: InstanceRecord, *, rebalance: bool) -> dict[str, Any]:
        zone = record.instance.zone if record.instance else self.region + "a"
        detail: dict[str, str] = {"instance-id": record.instance_id}
        if not rebalance:
            detail["instance-action"] = "terminate"
        return {
            "version": "0", "id": f"sim-{next(self._ids)}",
            "detail-type": "EC2 Instance Rebalance Recommendation" if rebalance
            else "EC2 Spot Instance Interruption Warning",
            "source": "aws.ec2", "account": ACCOUNT,
            "time": self.cloud.epoch_time(self.loop.now).strftime("%Y-%m-%dT%H:%M:%SZ"), "region": self.region,
            "resources": [f"arn:aws:ec2:{zone}:instance/{record.instance_id}"],
            "detail": detail,
        }

    def _reclaim(self, record: InstanceRecord) -> None:
        if record.alive:
            self.cloud.terminate([record.instance_id], interrupted=True)

    def _send(self, event: dict[str, Any]) -> None:
        if rule_for(event) is None:
            self.unrouted += 1
            if self.log:
                self.log("eventbridge", f"no rule of the stack matches {event['source']} / {event['detail-type']}: "
                                        "dropped")
            return
        visible = self.loop.now + self.delivery_seconds
        self.messages.append(Message(f"msg-{next(self._ids)}", json.dumps(event), visible))
        self._schedule_poll(self.delivery_seconds)

    def _schedule_poll(self, delay: float) -> None:
        at = self.loop.now + delay
        if self._poll_at is not None and self._poll_at <= at:
            return
        self._poll_at = at
        self.loop.at(at, "sqs event source", self._poll)

    def _visible(self) -> list[Message]:
        return [m for m in self.messages if m.visible_at <= self.loop.now]

    def _poll(self) -> None:
        """The event source's pollers: every free one receives a batch of visible messages and invokes
        the function with it; more pollers while messages wait, back to the initial count when none do."""
        now = self.loop.now
        if self._poll_at is not None and self._poll_at <= now:
            self._poll_at = None
        floor = min(INITIAL_BATCHES, self.max_concurrency)
        self._pollers = max(self._pollers, floor)
        while self._in_flight < self._pollers and (visible := self._visible()):
            self._receive(visible[: self.batch_size])
        if self._visible():
            if self._pollers < self.max_concurrency and not self._scaling:
                self._scaling = True
                self.loop.after(SCALE_UP_SECONDS, "sqs event source scales up", self._scale_up)
        else:
            self._pollers = floor
        later = [m.visible_at for m in self.messages if m.visible_at > now]
        if later:
            self._schedule_poll(min(later) - now)

    def _scale_up(self) -> None:
        self._scaling = False
        if self._visible():
            self._pollers = min(self._pollers + 1, self.max_concurrency)
        self._poll()

    def _receive(self, batch: list[Message]) -> None:
        """ReceiveMessage: the batch is in flight (invisible for the visibility timeout) and an invocation
        of the function with it starts now."""
        for m in batch:
            m.receive_count += 1
            m.visible_at = self.loop.now + self.visibility_timeout_seconds
        self._in_flight += 1
        self.loop.at(self.loop.now, "interruption", lambda: self._deliver(batch), lambda_call=True)

    def _deliver(self, batch: list[Message]) -> None:
        """One invocation of the interruption function with ``batch`` (a task: it runs beside the others)."""
        try:
            self._invoke_with(batch)
        finally:
            self._in_flight -= 1
            self._schedule_poll(0.0)

    def _invoke_with(self, batch: list[Message]) -> None:
        arn = f"arn:aws:sqs:{self.region}:{ACCOUNT}:{QUEUE_NAME}"
        event = {"Records": [{
            "messageId": m.message_id, "receiptHandle": f"rh-{m.message_id}-{m.receive_count}", "body": m.body,
            "attributes": {"ApproximateReceiveCount": str(m.receive_count),
                           "SentTimestamp": str(int(self.cloud.epoch_time(self.loop.now).timestamp() * 1000))},
            "messageAttributes": {}, "md5OfBody": "", "eventSource": "aws:sqs", "eventSourceARN": arn,
            "eventSourceArn": arn, "awsRegion": self.region} for m in batch]}
        try:
            response = self.invoke(event)
            failed = {str(f.get("itemIdentifier")) for f in response.get("batchItemFailures") or ()}
        except Exception as exc:  # the whole batch returns after the visibility timeout
            if self.log:
                self.log("interruption", f"invocation failed: {type(exc).__name__}: {exc}")
            failed = {m.message_id for m in batch}
            retry_in = self.visibility_timeout_seconds
        else:
            retry_in = self.retry_visibility_seconds
        for m in batch:
            if m.message_id not in failed:
                self.messages.remove(m)
                self.outcomes["handled"] = self.outcomes.get("handled", 0) + 1
            elif m.receive_count >= self.max_receive_count:
                self.messages.remove(m)
                self.dead_letters.append(m)
                if self.log:
                    self.log("interruption", f"message {m.message_id} moved to the DLQ after {m.receive_count} "
                                             "receives")
            else:
                m.visible_at = self.loop.now + retry_in
                self.outcomes["retried"] = self.outcomes.get("retried", 0) + 1
        if self.log:
            self.log("interruption", f"batch of {len(batch)}: {len(batch) - len(failed)} handled, "
                                     f"{len(failed)} returned for retry")
