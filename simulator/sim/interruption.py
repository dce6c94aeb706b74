"""Spot interruptions, the interruption queue and its Lambda trigger, in virtual time.

``interrupt`` plays an AWS FIS ``aws:ec2:send-spot-instance-interruptions`` action: for each chosen spot
instance EC2 emits the "EC2 Spot Instance Interruption Warning" EventBridge event (the stack's rule
routes it to the interruption queue) and reclaims the instance ``notice_seconds`` (two minutes) later.

The queue is modelled here rather than in moto, whose visibility timeouts run on the wall clock: a
message becomes visible ``delivery_seconds`` after the event; Lambda's SQS event source mapping hands
visible messages to the real interruption handler in batches of ``batch_size``; messages named in the
handler's ``batchItemFailures`` come back after ``retry_visibility_seconds`` (the handler shortens their
visibility to that), a failed invocation returns the whole batch after the queue's visibility timeout,
and a message received ``max_receive_count`` times goes to the dead-letter queue.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from simulator.sim.cloud import CloudWorld, InstanceRecord
from simulator.sim.engine import EventLoop

ACCOUNT = "123456789012"
QUEUE_NAME = "autoscaler-interruption"


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
    visibility_timeout_seconds: float = 130.0
    retry_visibility_seconds: float = 10.0
    max_receive_count: int = 3  # infra/interruption_queue.py MAX_RECEIVE_COUNT
    delivery_seconds: float = 1.0
    notice_seconds: float = 120.0
    log: Callable[[str, str], None] | None = None
    messages: list[Message] = field(default_factory=list)
    dead_letters: list[Message] = field(default_factory=list)
    outcomes: dict[str, int] = field(default_factory=dict)  # message outcome -> count
    _ids: Any = field(default_factory=itertools.count)
    _poll_due: bool = False

    def interrupt(self, *, count: int, node_pool: str | None = None, rebalance: bool = False) -> list[str]:
        """Send interruption warnings to ``count`` live spot instances (of ``node_pool`` when given) and
        reclaim them after the notice, or with ``rebalance`` only send EC2 Instance Rebalance
        Recommendations (no reclaim follows); returns the instance ids."""
        chosen = [r for r in sorted(self.cloud.live(), key=lambda r: r.instance_id)
                  if r.instance is not None and r.instance.capacity_type == "spot" and not r.interrupted
                  and (node_pool is None or r.instance.node_pool == node_pool)][:count]
        for record in chosen:
            self._send(self._event(record, rebalance=rebalance))
            if not rebalance:
                record.interrupted = True
                self.loop.after(self.notice_seconds, f"EC2 reclaims {record.instance_id}",
                                lambda r=record: self._reclaim(r))  # type: ignore[misc]
        return [r.instance_id for r in chosen]

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
        visible = self.loop.now + self.delivery_seconds
        self.messages.append(Message(f"msg-{next(self._ids)}", json.dumps(event), visible))
        self._schedule_poll(self.delivery_seconds)

    def _schedule_poll(self, delay: float) -> None:
        if not self._poll_due:
            self._poll_due = True
            self.loop.after(delay, "interruption", self._poll, lambda_call=True)

    def _poll(self) -> None:
        self._poll_due = False
        now = self.loop.now
        visible = [m for m in self.messages if m.visible_at <= now][: self.batch_size]
        if visible:
            self._deliver(visible)
        later = [m.visible_at for m in self.messages if m.visible_at > self.loop.now]
        if any(m.visible_at <= self.loop.now for m in self.messages):
            self._schedule_poll(0.0)
        elif later:
            self._schedule_poll(min(later) - self.loop.now)

    def _deliver(self, batch: list[Message]) -> None:
        arn = f"arn:aws:sqs:{self.region}:{ACCOUNT}:{QUEUE_NAME}"
        for m in batch:
            m.receive_count += 1
            m.visible_at = self.loop.now + self.visibility_timeout_seconds  # in flight
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
