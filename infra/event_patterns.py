"""The EventBridge patterns of the interruption rules, as plain data: the CDK stack builds its rules
from them, and the end-to-end test puts them on a moto event bus, so both use exactly the same patterns.
Importing this module loads no CDK (no jsii process)."""

from __future__ import annotations

from typing import Any

# The event kinds, named as the interruption handler and the metrics' Kind dimension name them, with the
# exact EventBridge patterns. State changes are limited to the states that take a node away.
EVENT_PATTERNS: dict[str, dict[str, Any]] = {
    "spotInterruption": {"source": ["aws.ec2"], "detail-type": ["EC2 Spot Instance Interruption Warning"]},
    "rebalance": {"source": ["aws.ec2"], "detail-type": ["EC2 Instance Rebalance Recommendation"]},
    "scheduledChange": {"source": ["aws.health"], "detail-type": ["AWS Health Event"],
                        "detail": {"service": ["EC2"], "eventTypeCategory": ["scheduledChange"]}},
    "stateChange": {"source": ["aws.ec2"], "detail-type": ["EC2 Instance State-change Notification"],
                    "detail": {"state": ["stopping", "stopped", "shutting-down", "terminated"]}},
    # Auto Scaling groups with lifecycle hooks (managed node groups, self-managed groups): the Node
    # Termination Handler's ASG path — drain before terminate, continue a launch once the node is Ready.
    # Groups without a hook send nothing here.
    "asgLifecycle": {"source": ["aws.autoscaling"], "detail-type": ["EC2 Instance-terminate Lifecycle Action",
                                                                    "EC2 Instance-launch Lifecycle Action"]},
}
