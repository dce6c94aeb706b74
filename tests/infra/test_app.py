"""The CDK app synthesises a stack for a cluster (real synthesis through jsii, no AWS calls)."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk.assertions import Template

from infra.app import build_app


def test_app_synthesises_a_stack_per_cluster() -> None:
    app = build_app(cdk.App(context={"cluster": "unit"}))
    stack = app.node.find_child("eks-autoscaler-unit")
    template = Template.from_stack(stack)  # type: ignore[arg-type]
    template.has_resource_properties("AWS::SQS::Queue", {"MessageRetentionPeriod": 300})
