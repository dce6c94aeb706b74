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
# No provisioner pass ran to the end for this long: the heartbeat alarm fires (missing data breaches).
HEARTBEAT_MINUTES = 5
# A function whose longest invocation reaches this share of its timeout is about to time out.
NEAR_TIMEOUT = 0.9
# Older than a spot interruption's two-minute notice: the interruption function is not keeping up.
QUEUE_AGE_SECONDS = 120
# Functions invoked asynchronously (Scheduler, replacement requests): their events can be dropped.
ASYNC_FUNCTIONS = ("provisioner", "disruption")
# The watcher runs to (nearly) its timeout by design: no near-timeout alarm. One invocation ends every
# 10 minutes, so a 20-minute period always holds one's Errors datapoint unless it did not run.
WATCHER_HEARTBEAT_MINUTES = 20
_INSIGHTS_STAT = {"Sum": "SUM", "Maximum": "MAX", "Average": "AVG", "p90": "MAX"}


class Monitoring(Construct):
    """``dashboard`` and ``alarms`` (name -> Alarm) are public; ``topic`` when notifications are configured."""

    def __init__(self, scope: Construct, construct_id: str, *, config: ClusterConfig,
                 functions: dict[str, lambda_.Function], queue: sqs.IQueue, dead_letter_queue: sqs.IQueue) -> None:
        super().__init__(scope, construct_id)
        self.config = config
        self.service = mc.service_name(config.cluster_name)
        self.functions = functions
        self.queue = queue
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

    def spot_share(self) -> cw.MathExpression:
        """% of our nodes that are spot, from ``Nodes`` by capacity type: a metric of its own would bill
        $0.30 a month for what the dashboard can compute (docs/cost.md)."""
        schema = ",".join([mc.NAMESPACE, *mc.NODES.dimensions, mc.SERVICE_DIMENSION])

        def nodes(where: str) -> str:
            # Each NodePool's series at its period maximum, summed across the pools.
            return (f"SUM(SEARCH('{{{schema}}} MetricName=\"{mc.NODES.name}\" "
                    f"{mc.SERVICE_DIMENSION}=\"{self.service}\"{where}', 'Maximum', {PERIOD.to_seconds()}))")

        spot = nodes(f' {mc.CAPACITY_TYPE}="spot"')
        return cw.MathExpression(expression=f"100 * {spot} / {nodes('')}", using_metrics={}, period=PERIOD,
                                 label="spot share (%)")

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
               datapoints: int | None = None, below: bool = False, missing_breaches: bool = False) -> cw.Alarm:
        alarm = metric.create_alarm(
            self, f"{name}Alarm",
            alarm_description=description,
            threshold=threshold,
            evaluation_periods=periods,
            datapoints_to_alarm=datapoints or periods,
            comparison_operator=(cw.ComparisonOperator.LESS_THAN_THRESHOLD if below
                                 else cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD),
            treat_missing_data=(cw.TreatMissingData.BREACHING if missing_breaches
                                else cw.TreatMissingData.NOT_BREACHING),
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
            "ProvisionerHeartbeat": self._alarm(
                "ProvisionerHeartbeat",
                self.metric(mc.PASSES_SUCCEEDED).with_(period=cdk.Duration.minutes(self.heartbeat_minutes)),
                description=f"No provisioner pass ran to the end in {self.heartbeat_minutes} minutes: pending "
                            "pods get no nodes. Check the schedule, the function's errors and throttles, and its "
                            "logs.",
                threshold=1, periods=1, below=True, missing_breaches=True),
            "InterruptionQueueAge": self._alarm(
                "InterruptionQueueAge",
                self.queue.metric_approximate_age_of_oldest_message(period=PERIOD, statistic="Maximum"),
                description=f"An interruption message has waited over {QUEUE_AGE_SECONDS} s (a spot notice's "
                            "length): the interruption function is failing, throttled or too slow.",
                threshold=QUEUE_AGE_SECONDS, periods=2),
        }
        for name, function in self.functions.items():
            title = f"{name.capitalize()}Errors"
            if name == "watcher":
                # One alarm is both its errors and its heartbeat ($0.10 a month each): every invocation
                # reports Errors (0 when fine), so no data in a period means it did not run at all.
                alarms[title] = self._alarm(
                    title, function.metric_errors(period=cdk.Duration.minutes(WATCHER_HEARTBEAT_MINUTES),
                                                  statistic="Sum"),
                    description=f"The watcher function failed (it never reached the Kubernetes API for a whole run) "
                                f"or did not run in {WATCHER_HEARTBEAT_MINUTES} minutes: new pending pods wait for "
                                "the provisioner's safety pass. See its log group, schedule and throttles.",
                    threshold=1, periods=1, missing_breaches=True)
                continue
            alarms[title] = self._alarm(
                title, function.metric_errors(period=cdk.Duration.minutes(5), statistic="Sum"),
                description=f"The {name} function is failing; see its log group.",
                threshold=1, periods=3, datapoints=2)
            timeout_ms = self.timeout_seconds(function) * 1000
            title = f"{name.capitalize()}DurationNearTimeout"
            alarms[title] = self._alarm(
                title, function.metric_duration(period=cdk.Duration.minutes(5), statistic="Maximum"),
                description=f"A {name} invocation ran for over {int(NEAR_TIMEOUT * 100)}% of its "
                            f"{timeout_ms // 1000} s timeout: it is about to be cut off mid-pass.",
                threshold=round(NEAR_TIMEOUT * timeout_ms), periods=1)
            if name in ASYNC_FUNCTIONS:
                title = f"{name.capitalize()}AsyncEventsDropped"
                alarms[title] = self._alarm(
                    title, self.lambda_metric(function, "AsyncEventsDropped", period=cdk.Duration.minutes(5)),
                    description=f"Lambda dropped asynchronous events of the {name} function (too old behind "
                                "its reserved concurrency, or failing): runs were skipped.",
                    threshold=1, periods=1)
        return alarms

    @property
    def heartbeat_minutes(self) -> int:
        """Two safety passes' worth with the watcher (one a period, jitter aside), else HEARTBEAT_MINUTES."""
        return max(HEARTBEAT_MINUTES, 2 * self.config.provisioner.period_seconds // 60)

    @staticmethod
    def timeout_seconds(function: lambda_.Function) -> int:
        assert function.timeout is not None
        return int(function.timeout.to_seconds())

    @staticmethod
    def lambda_metric(function: lambda_.Function, name: str, *, period: cdk.Duration = PERIOD,
                      statistic: str = "Sum", label: str | None = None) -> cw.Metric:
        return function.metric(name, period=period, statistic=statistic, label=label)

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
        self._fleet_widgets(dashboard)
        functions = self.functions.items()
        dashboard.add_widgets(
            self._graph("Lambda errors", [f.metric_errors(period=PERIOD, label=n) for n, f in functions]),
            self._graph("Lambda duration (p90)",
                        [f.metric_duration(period=PERIOD, statistic="p90", label=n) for n, f in functions]),
            self._graph("Lambda throttles", [f.metric_throttles(period=PERIOD, label=n) for n, f in functions]),
        )
        dashboard.add_widgets(
            cw.GraphWidget(
                title="Lambda duration (max) against timeout (ms)", width=12, height=6,
                left=[f.metric_duration(period=PERIOD, statistic="Maximum", label=n) for n, f in functions],
                left_annotations=[cw.HorizontalAnnotation(value=self.timeout_seconds(f) * 1000, label=f"{n} timeout")
                                  for n, f in functions]),
            self._graph("Lambda async events dropped",
                        [self.lambda_metric(f, "AsyncEventsDropped", label=n) for n, f in functions
                         if n in ASYNC_FUNCTIONS], width=6),
            self._graph("Interruption queue: oldest message (s)",
                        [self.queue.metric_approximate_age_of_oldest_message(period=PERIOD, statistic="Maximum")],
                        width=6),
        )
        return dashboard

    def _fleet_widgets(self, dashboard: cw.Dashboard) -> None:
        """What an operator asks first: how many nodes, of which pools, spot or not, what they cost, which
        are leaving and which never arrived, and whether the provisioner is alive."""
        dashboard.add_widgets(
            self._graph("Nodes by NodePool and capacity type",
                        [self.grouped(mc.NODES, by=(mc.NODE_POOL, mc.CAPACITY_TYPE))]),
            self._graph("Cost per hour (USD) by NodePool and capacity type",
                        [self.grouped(mc.HOURLY_COST, by=(mc.NODE_POOL, mc.CAPACITY_TYPE))]),
            self._graph("Spot share of nodes (%)", [self.spot_share()]),
        )
        dashboard.add_widgets(
            self._graph("Nodes created by NodePool", [self.grouped(mc.NODES_LAUNCHED, by=(mc.NODE_POOL,))],
                        width=6),
            self._graph("Nodes terminated by NodePool", [self.grouped(mc.NODES_TERMINATED, by=(mc.NODE_POOL,))],
                        width=6),
            cw.GraphWidget(title="Nodes cordoned or draining, and the oldest drain (s)", width=6, height=6,
                           left=[self.metric(mc.NODES_DRAINING)], right=[self.metric(mc.LONGEST_DRAIN_SECONDS)]),
            self._graph("Never-registered instances and provisioner passes",
                        [self.metric(mc.INSTANCES_NEVER_REGISTERED), self.metric(mc.PASSES_SUCCEEDED)], width=6),
        )

    def dashboard_url(self) -> str:
        region = cdk.Stack.of(self).region
        return (f"https://{region}.console.aws.amazon.com/cloudwatch/home?region={region}"
                f"#dashboards:name={self.dashboard.dashboard_name}")
