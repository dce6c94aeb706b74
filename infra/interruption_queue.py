"""Interruption plumbing: the SQS queue the interruption function consumes, its dead-letter queue, and the
EventBridge rules that feed it (spot interruption warnings, rebalance recommendations, AWS Health
scheduled changes for EC2, instance state changes, Auto Scaling terminate lifecycle actions)."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.event_patterns import EVENT_PATTERNS

__all__ = ["EVENT_PATTERNS", "InterruptionQueue"]

# Karpenter's and the Node Termination Handler's templates keep messages 300 s: a spot warning is
# useless after its two minutes, and an old one must not drain a node that replaced the instance.
RETENTION = cdk.Duration.seconds(300)
DLQ_RETENTION = cdk.Duration.days(14)
MAX_RECEIVE_COUNT = 3


def _pattern(raw: dict[str, Any]) -> events.EventPattern:
    return events.EventPattern(source=raw["source"], detail_type=raw["detail-type"], detail=raw.get("detail"))


class InterruptionQueue(Construct):
    """The queue, its DLQ and the rules (one per event kind). ``queue``, ``dead_letter_queue``, ``rules`` are public."""

    def __init__(self, scope: Construct, construct_id: str, *, visibility_timeout: cdk.Duration) -> None:
        super().__init__(scope, construct_id)
        self.dead_letter_queue = self._dead_letter_queue()
        self.queue = self._queue(visibility_timeout)
        self.rules = {kind: self._rule(kind, pattern) for kind, pattern in EVENT_PATTERNS.items()}

    def _dead_letter_queue(self) -> sqs.Queue:
        return sqs.Queue(self, "DeadLetterQueue", retention_period=DLQ_RETENTION,
                         encryption=sqs.QueueEncryption.SQS_MANAGED, enforce_ssl=True)

    def _queue(self, visibility_timeout: cdk.Duration) -> sqs.Queue:
        # SSE-SQS rather than a KMS key: EventBridge cannot send to a queue encrypted with the AWS-managed
        # SQS key, and a customer key would add cost and a key policy for no gain on these public events.
        return sqs.Queue(
            self, "Queue",
            retention_period=RETENTION,
            visibility_timeout=visibility_timeout,
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            dead_letter_queue=sqs.DeadLetterQueue(queue=self.dead_letter_queue, max_receive_count=MAX_RECEIVE_COUNT),
        )

    def _rule(self, kind: str, pattern: dict[str, Any]) -> events.Rule:
        rule = events.Rule(self, f"{kind[0].upper()}{kind[1:]}Rule", event_pattern=_pattern(pattern),
                           description=f"Forwards {pattern['detail-type'][0]} events to the interruption queue")
        # The target grants events.amazonaws.com sqs:SendMessage with aws:SourceArn = this rule's ARN.
        rule.add_target(targets.SqsQueue(self.queue, dead_letter_queue=self.dead_letter_queue))
        return rule
