"""The CDK app: one stack per cluster file, named from the file's clusterName; unknown clusters fail clearly."""

from __future__ import annotations

import aws_cdk as cdk
import pytest

from autoscaler.config import ConfigError
from infra.app import build_app
from tests.infra.conftest import Synth


def test_app_synthesises_the_stack_for_the_demo_cluster(demo: Synth) -> None:
    assert demo.stack.stack_name == "eks-autoscaler-demo"
    assert demo.stack.region == "us-west-2"
    demo.template.has_resource_properties("AWS::SQS::Queue", {"MessageRetentionPeriod": 300})


def test_unknown_cluster_names_the_file_and_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError) as exc:
        build_app(cdk.App(context={"cluster": "nope", "skipBundling": "true"}))
    assert str(exc.value) == "clusters/nope.yaml: no such cluster file; known clusters: demo"
