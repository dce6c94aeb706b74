"""The one list of CloudWatch metrics the autoscaler emits.

Handlers emit from these definitions (Embedded Metric Format through Powertools) and the CDK stack's
dashboard and alarms read from them, so a metric shown on the dashboard is one the code emits. Pure:
no Powertools or boto3 import; units are the CloudWatch unit names Powertools accepts as strings.

Every metric carries Powertools' ``service`` dimension, whose value identifies the cluster
(:func:`service_name`), plus the extra dimensions listed here. A metric's dimension set is fixed:
CloudWatch treats each distinct set as a different metric, so emit exactly these.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol

NAMESPACE = "EKSServerlessAutoscaler"
SERVICE_DIMENSION = "service"

Emitter = Literal["provisioner", "interruption", "disruption"]
Unit = Literal["Count", "Seconds", "Percent", "None"]
Statistic = Literal["Sum", "Average", "Maximum", "p90"]

# Dimension names.
INSTANCE_TYPE = "InstanceType"
CAPACITY_TYPE = "CapacityType"
ZONE = "Zone"
REASON = "Reason"
NODE_POOL = "NodePool"
RESOURCE = "Resource"
KIND = "Kind"
ACTION = "Action"
GUARD = "Guard"
OUTCOME = "Outcome"
STAGE = "Stage"


def service_name(cluster_name: str) -> str:
    """The ``service`` dimension (and ``POWERTOOLS_SERVICE_NAME``) of every function of one cluster."""
    return f"eks-autoscaler-{cluster_name}"


@dataclass(frozen=True, slots=True)
class MetricDef:
    name: str
    unit: Unit
    emitters: tuple[Emitter, ...]
    description: str
    dimensions: tuple[str, ...] = ()
    # The statistic that makes sense on a graph (a gauge's Maximum, a counter's Sum).
    statistic: Statistic = "Sum"


# --- provisioner ---
PENDING_PODS = MetricDef("PendingPods", "Count", ("provisioner",),
                         "Pods without a node at the start of a plan (gauge).", statistic="Maximum")
UNSCHEDULABLE_PODS = MetricDef("UnschedulablePods", "Count", ("provisioner",),
                               "Pending pods no NodePool can place (gauge); alarmed after 10 minutes.",
                               statistic="Maximum")
PODS_NOMINATED = MetricDef("PodsNominated", "Count", ("provisioner",),
                           "Pending pods placed on existing nodes or capacity already launching.")
# Sparse (a data point per launch) and CloudWatch bills metrics by the hour they receive data, so the
# four dimensions cost little; each launch has one NodePool, so the pool multiplies nothing by itself.
NODES_LAUNCHED = MetricDef("NodesLaunched", "Count", ("provisioner",), "Instances launched by CreateFleet.",
                           dimensions=(NODE_POOL, INSTANCE_TYPE, CAPACITY_TYPE, ZONE))
LAUNCH_FAILURES = MetricDef("LaunchFailures", "Count", ("provisioner",),
                            "Launches that failed, by EC2 error code (InsufficientInstanceCapacity, ...).",
                            dimensions=(REASON,))
PLAN_SECONDS = MetricDef("PlanSeconds", "Seconds", ("provisioner",), "Time to compute one plan.",
                         statistic="p90")
POD_TO_LAUNCH_SECONDS = MetricDef("PodToLaunchSeconds", "Seconds", ("provisioner",),
                                  "From a pod's creation to the launch of the node it was planned onto.",
                                  statistic="p90")
NODE_POOL_USAGE = MetricDef("NodePoolUsage", "Percent", ("provisioner",),
                            "Provisioned capacity as a share of the NodePool's limit.",
                            dimensions=(NODE_POOL, RESOURCE), statistic="Maximum")
MANAGED_HOURLY_COST = MetricDef("ManagedHourlyCost", "None", ("provisioner",),
                                "USD per hour of the instances the autoscaler manages (gauge).",
                                statistic="Maximum")
PASS_ERRORS = MetricDef("PassErrors", "Count", ("provisioner",),
                        "Failures a pass isolated and carried on from, by stage (lifecycle, claims, events).",
                        dimensions=(STAGE,))
HOURLY_COST = MetricDef("HourlyCost", "None", ("provisioner",),
                        "USD per hour of the instances the autoscaler manages, by NodePool and capacity type.",
                        dimensions=(NODE_POOL, CAPACITY_TYPE), statistic="Maximum")
NODES = MetricDef("Nodes", "Count", ("provisioner",),
                  "Nodes of the autoscaler's NodePools in the cluster, by NodePool and capacity type (gauge).",
                  dimensions=(NODE_POOL, CAPACITY_TYPE), statistic="Maximum")
NODES_DRAINING = MetricDef("NodesDraining", "Count", ("provisioner",),
                           "The autoscaler's nodes cordoned or draining (gauge).", statistic="Maximum")
LONGEST_DRAIN_SECONDS = MetricDef("LongestDrainSeconds", "Seconds", ("provisioner",),
                                  "How long the oldest drain in progress has been running (gauge; 0: none).",
                                  statistic="Maximum")
INSTANCES_NEVER_REGISTERED = MetricDef("InstancesNeverRegistered", "Count", ("provisioner",),
                                       "Instances terminated because their node never registered in time.")
NODES_TERMINATED = MetricDef("NodesTerminated", "Count", ("provisioner", "disruption"),
                             "Our instances terminated, by NodePool and reason (a disruption reason, or "
                             "NeverRegistered for the registration time-out).", dimensions=(NODE_POOL, REASON))
PASSES_SUCCEEDED = MetricDef("PassesSucceeded", "Count", ("provisioner",),
                             "Provisioner passes that ran to the end (heartbeat: alarmed when none arrive).")
PRICES_STALE = MetricDef("PricesStale", "Count", ("provisioner",),
                         "1 when prices are older than their refresh interval and a fallback was used.",
                         statistic="Maximum")

# --- interruption ---
INTERRUPTION_EVENTS = MetricDef("InterruptionEvents", "Count", ("interruption",),
                                "EC2 events received, by kind and the configured action "
                                "(Kind malformed/unknown: Action ignore).",
                                dimensions=(KIND, ACTION))
INTERRUPTION_OUTCOMES = MetricDef(
    "InterruptionOutcomes", "Count", ("interruption",),
    "Interruption messages by kind and what came of them: acted, ignored, notInCluster, failed (returned "
    "for retry). Kind is malformed or unknown for messages that are not one of the four EC2 events.",
    dimensions=(KIND, OUTCOME))
PODS_EVICTED = MetricDef("PodsEvicted", "Count", ("interruption", "disruption"),
                         "Pods evicted through the Eviction API while draining nodes.")
EVICTIONS_BLOCKED_BY_PDB = MetricDef("EvictionsBlockedByPDB", "Count", ("interruption", "disruption"),
                                     "Eviction attempts refused (HTTP 429) by a PodDisruptionBudget.")
EVICTIONS_THROTTLED = MetricDef("EvictionsThrottled", "Count", ("interruption", "disruption"),
                                "Eviction attempts refused by API throttling (HTTP 429 without a PDB "
                                "cause) or a 5xx, retried with backoff; never counted as PDB refusals.")
NODES_DELETED_INSTANCE_GONE = MetricDef(
    "NodesDeletedInstanceGone", "Count", ("interruption",),
    "Nodes whose drain could not finish (a PDB) deleted because EC2 reports their instance terminated "
    "or unknown: their pods died with it.")
DRAIN_SECONDS = MetricDef("DrainSeconds", "Seconds", ("interruption", "disruption"),
                          "From cordon to the last pod gone.", statistic="p90")
EVENT_TO_CORDON_SECONDS = MetricDef("EventToCordonSeconds", "Seconds", ("interruption",),
                                    "From the EC2 event's time to the node being cordoned.", statistic="p90")

# --- disruption ---
NODES_DISRUPTED = MetricDef("NodesDisrupted", "Count", ("disruption",),
                            "Nodes removed, by reason (Empty, Expired, Underutilized, Drifted, Unhealthy, "
                            "Overprovisioned).",
                            dimensions=(REASON,))
DISRUPTION_SAVINGS = MetricDef("DisruptionSavings", "None", ("disruption",),
                               "USD per hour saved by the nodes removed or replaced in one run.")
DISRUPTION_BLOCKED = MetricDef("DisruptionBlocked", "Count", ("disruption",),
                               "Candidates kept, by the guard that kept them (Budget, PDB, DoNotDisrupt, ...).",
                               dimensions=(GUARD,))
NODES_OF_REMOVED_NODE_POOL = MetricDef("NodesOfRemovedNodePool", "Count", ("disruption",),
                                       "Our nodes whose NodePool is no longer in the cluster file (left "
                                       "running, never disrupted); alarmed when above 0.", statistic="Maximum")
KARPENTER_NODES_NOT_ADOPTED = MetricDef("KarpenterNodesNotAdopted", "Count", ("disruption",),
                                        "Nodes Karpenter launched for the cluster, left alone because "
                                        "migration.adoptKarpenterNodes is off.", statistic="Maximum")

CATALOGUE: dict[str, MetricDef] = {m.name: m for m in (
    PENDING_PODS, UNSCHEDULABLE_PODS, PODS_NOMINATED, NODES_LAUNCHED, LAUNCH_FAILURES, PLAN_SECONDS,
    POD_TO_LAUNCH_SECONDS, NODE_POOL_USAGE, MANAGED_HOURLY_COST, PRICES_STALE, PASS_ERRORS,
    HOURLY_COST, NODES, NODES_DRAINING, LONGEST_DRAIN_SECONDS, INSTANCES_NEVER_REGISTERED,
    PASSES_SUCCEEDED, NODES_TERMINATED,
    INTERRUPTION_EVENTS, INTERRUPTION_OUTCOMES, PODS_EVICTED, EVICTIONS_BLOCKED_BY_PDB, EVICTIONS_THROTTLED,
    NODES_DELETED_INSTANCE_GONE, DRAIN_SECONDS, EVENT_TO_CORDON_SECONDS,
    NODES_DISRUPTED, DISRUPTION_SAVINGS, DISRUPTION_BLOCKED, NODES_OF_REMOVED_NODE_POOL,
    KARPENTER_NODES_NOT_ADOPTED,
)}


def emitted_by(emitter: Emitter) -> list[MetricDef]:
    """The metrics one function emits."""
    return [m for m in CATALOGUE.values() if emitter in m.emitters]


class MetricsSink(Protocol):
    """Where services emit metrics. The handlers' sink writes Embedded Metric Format through Powertools;
    tests use :class:`RecordingSink`."""

    def emit(self, metric: MetricDef, value: float, **dimensions: str) -> None:
        """Record one data point. ``dimensions`` must be exactly ``metric.dimensions`` (ValueError otherwise)."""
        ...


def check_dimensions(metric: MetricDef, dimensions: Mapping[str, str]) -> None:
    if set(dimensions) != set(metric.dimensions):
        raise ValueError(f"metric {metric.name} takes dimensions {list(metric.dimensions)}, got {sorted(dimensions)}")


@dataclass
class RecordingSink:
    """A sink that keeps every data point, for tests and the local simulation."""

    points: list[tuple[str, float, dict[str, str]]] = field(default_factory=list)

    def emit(self, metric: MetricDef, value: float, **dimensions: str) -> None:
        check_dimensions(metric, dimensions)
        self.points.append((metric.name, value, dict(dimensions)))

    def total(self, name: str, **dimensions: str) -> float:
        return sum(v for n, v, d in self.points
                   if n == name and all(d.get(k) == val for k, val in dimensions.items()))
