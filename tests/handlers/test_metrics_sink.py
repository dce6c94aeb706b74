"""Metrics go out as EMF with exactly the catalogue's dimensions; a wrong dimension set is refused."""

from __future__ import annotations

import json

import pytest
from aws_lambda_powertools import Metrics

from autoscaler.handlers.observability import PowertoolsSink
from autoscaler.metrics_catalog import NODES_LAUNCHED, PENDING_PODS, RecordingSink


def test_dimensioned_metric_is_its_own_emf_document(capsys: pytest.CaptureFixture[str]) -> None:
    shared = Metrics(namespace="EKSServerlessAutoscaler", service="eks-autoscaler-test")
    sink = PowertoolsSink(shared)
    sink.emit(NODES_LAUNCHED, 2, NodePool="default", InstanceType="m5.large", CapacityType="spot", Zone="us-east-1a")
    sink.emit(PENDING_PODS, 5)
    shared.flush_metrics()
    docs = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    launched = next(d for d in docs if "NodesLaunched" in d)
    assert launched["NodesLaunched"] == [2.0] or launched["NodesLaunched"] == 2.0
    assert set(launched["_aws"]["CloudWatchMetrics"][0]["Dimensions"][0]) == {
        "service", "NodePool", "InstanceType", "CapacityType", "Zone"}
    pending = next(d for d in docs if "PendingPods" in d)
    assert pending["_aws"]["CloudWatchMetrics"][0]["Dimensions"][0] == ["service"]


@pytest.mark.parametrize("sink", [PowertoolsSink(Metrics(namespace="x")), RecordingSink()])
def test_wrong_dimensions_are_refused(sink: PowertoolsSink | RecordingSink) -> None:
    with pytest.raises(ValueError, match="NodesLaunched takes dimensions"):
        sink.emit(NODES_LAUNCHED, 1, InstanceType="m5.large")


def test_recording_sink_totals() -> None:
    sink = RecordingSink()
    sink.emit(NODES_LAUNCHED, 1, NodePool="p", InstanceType="a", CapacityType="spot", Zone="z")
    sink.emit(NODES_LAUNCHED, 2, NodePool="p", InstanceType="b", CapacityType="spot", Zone="z")
    assert sink.total("NodesLaunched") == 3
    assert sink.total("NodesLaunched", InstanceType="b") == 2
