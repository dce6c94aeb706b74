"""The per-cluster autoscaler stack. Constructs are split by concern (queue and rules, functions,
identity, monitoring) and composed here."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_sqs as sqs
from constructs import Construct


class AutoscalerStack(cdk.Stack):
    def __init__(self, scope: Construct, construct_id: str, *, cluster_name: str, **kwargs: Any) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.cluster_name = cluster_name
        self.queue = sqs.Queue(
            self, "InterruptionQueue",
            retention_period=cdk.Duration.seconds(300),
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
        )
        cdk.CfnOutput(self, "InterruptionQueueArn", value=self.queue.queue_arn)
