"""CloudWatch dashboard and alarms. Every custom metric comes from ``autoscaler.metrics_catalog`` (the list
the handlers emit from); metrics with per-value dimensions (instance type, reason, ...) are graphed with
Metrics Insights queries grouped by that dimension, so new values appear without a redeploy."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from autoscaler import metrics_catalog as mc
from autoscaler.config import ClusterConfig

PERIOD = cdk.Duration.minutes(1)
_INSIGHTS_STAT = {"Sum": "SUM", "Maximum": "MAX", "Average": "AVG", "p90": "MAX"}


class Monitoring(Construct):
    """``dashboard`` and ``alarms`` (name -> Alarm) are public; ``topic`` when notifications are configured."""

    def __init__(self, scope: Construct, construct_id: str, *, config: ClusterConfig,
                 functions: dict[str, lambda_.Function], dead_letter_queue: sqs.IQueue) -> None:
        super().__init__(scope, construct_id)
        self.config = config
        self.service = mc.service_name(config.cluster_name)
        self.functions = functions
        self.dead_letter_queue = dead_letter_queue
        self.topic = self._topic()
        self.alarms = self._alarms()
        self.dashboard = self._dashboard()

    # --- metrics ---------------------------------------------------------------------------------

    def metric(self, definition: mc.MetricDef, *, label: str | None = None) -> cw.Metric:
        """A catalogue metric without extra dimensions, for this cluster."""
        if definition.dimensions:
            raise ValueError(f"{definition.name} has dimensions {definition.dimensions}: use grouped()")
        return cw.Metric(namespace=mc.NAMESPACE, metric_name=definition.name,
                         dimensions_map={mc.SERVICE_DIMENSION: self.service},
                         statistic=definition.statistic, period=PERIOD, label=label or definition.name)

    def grouped(self, definition: mc.MetricDef, *, by: tuple[str, ...]) -> cw.MathExpression:
        """A Metrics Insights query over one catalogue metric, one line per value of ``by``."""
        unknown = set(by) - set(definition.dimensions)
        if unknown:
            raise ValueError(f"{definition.name} has no dimension {sorted(unknown)}")
        schema = ", ".join([f'"{mc.NAMESPACE}"', mc.SERVICE_DIMENSION, *definition.dimensions])
        query = (f"SELECT {_INSIGHTS_STAT[definition.statistic]}({definition.name}) FROM SCHEMA({schema}) "
                 f"WHERE {mc.SERVICE_DIMENSION} = '{self.service}' GROUP BY {', '.join(by)}")
        return cw.MathExpression(expression=query, using_metrics={}, period=PERIOD, label="")

    # --- alarms ----------------------------------------------------------------------------------

    def _topic(self) -> sns.ITopic | None:
        alarms = self.config.alarms
        if alarms.topic_arn:
            return sns.Topic.from_topic_arn(self, "AlarmTopic", alarms.topic_arn)
        if not alarms.email:
            return None
        topic = sns.Topic(self, "AlarmTopic", display_name=f"EKS autoscaler alarms ({self.config.cluster_name})",
                          enforce_ssl=True)
        topic.add_subscription(subscriptions.EmailSubscription(alarms.email))
        return topic

    def _alarm(self, name: str, metric: cw.IMetric, *, description: str, threshold: float, periods: int,
               datapoints: int | None = None) -> cw.Alarm:
        alarm = metric.create_alarm(
            self, f"{name}Alarm",
            alarm_description=description,
            threshold=threshold,
            evaluation_periods=periods,
            datapoints_to_alarm=datapoints or periods,
            comparison_operator=cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
        )
        if self.topic is not None:
            alarm.add_alarm_action(cw_actions.SnsAction(self.topic))
            alarm.add_ok_action(cw_actions.SnsAction(self.topic))
        return alarm

    def _alarms(self) -> dict[str, cw.Alarm]:
        alarms = {
            "DeadLetterQueueNotEmpty": self._alarm(
                "DeadLetterQueueNotEmpty",
                self.dead_letter_queue.metric_approximate_number_of_messages_visible(
                    period=cdk.Duration.minutes(5), statistic="Maximum"),
                description="Interruption events failed repeatedly and were moved to the dead-letter queue; "
                            "inspect them and the interruption function's logs.",
                threshold=1, periods=1),
            "PodsUnschedulable": self._alarm(
                "PodsUnschedulable", self.metric(mc.UNSCHEDULABLE_PODS),
                description="Pods have been unschedulable by every NodePool for 10 minutes; see the "
                            "provisioner's logs for the reason per pod.",
                threshold=1, periods=10),
            "PricesStale": self._alarm(
                "PricesStale", self.metric(mc.PRICES_STALE).with_(period=cdk.Duration.minutes(5)),
                description="The provisioner is choosing instances on stale prices (Pricing or spot price "
                            "history calls failing).",
                threshold=1, periods=3),
            "NodePoolRemoved": self._alarm(
                "NodePoolRemoved", self.metric(mc.NODES_OF_REMOVED_NODE_POOL).with_(period=cdk.Duration.minutes(5)),
                description="Nodes of a NodePool no longer in the cluster file are running, never disrupted; "
                            "restore the NodePool or drain and delete them (docs/disruption.md).",
                threshold=1, periods=3),
        }
        for name, function in self.functions.items():
            title = f"{name.capitalize()}Errors"
            alarms[title] = self._alarm(
                title, function.metric_errors(period=cdk.Duration.minutes(5), statistic="Sum"),
                description=f"The {name} function is failing; see its log group.",
                threshold=1, periods=3, datapoints=2)
        return alarms

    # --- dashboard -------------------------------------------------------------------------------

    def _graph(self, title: str, metrics: list[cw.IMetric], *, width: int = 8) -> cw.GraphWidget:
        return cw.GraphWidget(title=title, left=metrics, width=width, height=6)

    def _dashboard(self) -> cw.Dashboard:
        dashboard = cw.Dashboard(self, "Dashboard", period_override=cw.PeriodOverride.AUTO)
        dashboard.add_widgets(cw.AlarmStatusWidget(title="Alarms", alarms=list(self.alarms.values()), width=24,
                                                   height=3))
        dashboard.add_widgets(
            self._graph("Pending and unschedulable pods",
                        [self.metric(mc.PENDING_PODS), self.metric(mc.UNSCHEDULABLE_PODS),
                         self.metric(mc.PODS_NOMINATED)]),
            self._graph("Managed capacity cost (USD/hour)", [self.metric(mc.MANAGED_HOURLY_COST)]),
            self._graph("NodePool usage of limits (%)",
                        [self.grouped(mc.NODE_POOL_USAGE, by=(mc.NODE_POOL, mc.RESOURCE))]),
        )
        dashboard.add_widgets(
            *(self._graph(f"Launches by {title}", [self.grouped(mc.NODES_LAUNCHED, by=(dimension,))], width=6)
              for title, dimension in (("instance type", mc.INSTANCE_TYPE), ("capacity type", mc.CAPACITY_TYPE),
                                       ("zone", mc.ZONE))),
            self._graph("Launch failures by reason", [self.grouped(mc.LAUNCH_FAILURES, by=(mc.REASON,))], width=6),
        )
        dashboard.add_widgets(
            self._graph("Plan seconds (p90)", [self.metric(mc.PLAN_SECONDS)]),
            self._graph("Pod-to-launch seconds (p90)", [self.metric(mc.POD_TO_LAUNCH_SECONDS)]),
            self._graph("Prices stale", [self.metric(mc.PRICES_STALE)]),
        )
        dashboard.add_widgets(
            self._graph("Interruption events by kind and action",
                        [self.grouped(mc.INTERRUPTION_EVENTS, by=(mc.KIND, mc.ACTION))], width=6),
            self._graph("Event-to-cordon and drain seconds (p90)",
                        [self.metric(mc.EVENT_TO_CORDON_SECONDS), self.metric(mc.DRAIN_SECONDS)], width=6),
            self._graph("Evictions and evictions blocked by PDBs",
                        [self.metric(mc.PODS_EVICTED), self.metric(mc.EVICTIONS_BLOCKED_BY_PDB)], width=6),
            self._graph("Interruption dead-letter queue depth",
                        [self.dead_letter_queue.metric_approximate_number_of_messages_visible(
                            period=PERIOD, statistic="Maximum")], width=6),
        )
        dashboard.add_widgets(
            # One Metrics Insights query per graph: outcomes get their own.
            self._graph("Interruption messages by kind and outcome",
                        [self.grouped(mc.INTERRUPTION_OUTCOMES, by=(mc.KIND, mc.OUTCOME))], width=24),
        )
        dashboard.add_widgets(
            self._graph("Nodes disrupted by reason", [self.grouped(mc.NODES_DISRUPTED, by=(mc.REASON,))]),
            self._graph("Disruption blocked by guard", [self.grouped(mc.DISRUPTION_BLOCKED, by=(mc.GUARD,))]),
            self._graph("Disruption savings (USD/hour)", [self.metric(mc.DISRUPTION_SAVINGS)]),
        )
        functions = self.functions.items()
        dashboard.add_widgets(
            self._graph("Lambda errors", [f.metric_errors(period=PERIOD, label=n) for n, f in functions]),
            self._graph("Lambda duration (p90)",
                        [f.metric_duration(period=PERIOD, statistic="p90", label=n) for n, f in functions]),
            self._graph("Lambda throttles", [f.metric_throttles(period=PERIOD, label=n) for n, f in functions]),
        )
        return dashboard

    def dashboard_url(self) -> str:
        region = cdk.Stack.of(self).region
        return (f"https://{region}.console.aws.amazon.com/cloudwatch/home?region={region}"
                f"#dashboards:name={self.dashboard.dashboard_name}")
