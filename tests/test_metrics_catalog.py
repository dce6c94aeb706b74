"""The metric catalogue is consistent: unique names, the names the issue lists, sane dimensions."""

from __future__ import annotations

import re

from autoscaler import metrics_catalog as mc

REQUIRED = {
    "provisioner": {"PendingPods", "PodsNominated", "NodesLaunched", "LaunchFailures", "PlanSeconds",
                    "PodToLaunchSeconds", "NodePoolUsage", "ManagedHourlyCost", "PricesStale", "UnschedulablePods"},
    "interruption": {"InterruptionEvents", "PodsEvicted", "EvictionsBlockedByPDB", "DrainSeconds",
                     "EventToCordonSeconds"},
    "disruption": {"NodesDisrupted", "DisruptionSavings", "DisruptionBlocked"},
}


def test_catalogue_holds_every_metric_each_function_emits() -> None:
    for emitter, names in REQUIRED.items():
        assert names <= {m.name for m in mc.emitted_by(emitter)}, emitter  # type: ignore[arg-type]


def test_names_and_dimensions_are_well_formed() -> None:
    for name, metric in mc.CATALOGUE.items():
        assert name == metric.name and re.fullmatch(r"[A-Z][A-Za-z]+", name)
        assert mc.SERVICE_DIMENSION not in metric.dimensions  # Powertools adds it
        assert len(set(metric.dimensions)) == len(metric.dimensions) <= 29  # CloudWatch's limit is 30 with service
        assert metric.description


def test_dimensioned_metrics() -> None:
    assert mc.NODES_LAUNCHED.dimensions == ("NodePool", "InstanceType", "CapacityType", "Zone")
    assert mc.LAUNCH_FAILURES.dimensions == ("Reason",)
    assert mc.INTERRUPTION_EVENTS.dimensions == ("Kind", "Action")
    assert mc.NODES_DISRUPTED.dimensions == ("Reason",)
    assert mc.DISRUPTION_BLOCKED.dimensions == ("Guard",)
    assert mc.service_name("demo") == "eks-autoscaler-demo"


def test_fleet_metrics_are_bounded_by_node_pool_and_capacity_type() -> None:
    # The per-pass gauges are billed every hour: their dimensions are the cluster file's NodePools and
    # the two capacity types, never per-instance values.
    for metric in (mc.NODES, mc.HOURLY_COST):
        assert metric.dimensions == ("NodePool", "CapacityType")
    for metric in (mc.NODES_DRAINING, mc.LONGEST_DRAIN_SECONDS, mc.PASSES_SUCCEEDED,
                   mc.INSTANCES_NEVER_REGISTERED):
        assert metric.dimensions == () and metric.emitters == ("provisioner",)
