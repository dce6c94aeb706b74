"""The synthesised template: rules, queue, functions, schedules, event source, monitoring, outputs; then
cdk-nag and cfn-lint over the whole of it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from aws_cdk.assertions import Match
from cfnlint.api import lint_file

from autoscaler import metrics_catalog as mc
from infra.bundling import PYTHON_VERSION
from infra.functions import HANDLERS
from infra.interruption_queue import EVENT_PATTERNS
from infra.lambda_limits import MAX_EVENT_AGE_SECONDS, RESERVED_CONCURRENCY
from tests.infra.conftest import Synth, render

RULES = {
    "InterruptionSpotInterruptionRule": {"source": ["aws.ec2"],
                                         "detail-type": ["EC2 Spot Instance Interruption Warning"]},
    "InterruptionRebalanceRule": {"source": ["aws.ec2"], "detail-type": ["EC2 Instance Rebalance Recommendation"]},
    "InterruptionScheduledChangeRule": {
        "source": ["aws.health"], "detail-type": ["AWS Health Event"],
        "detail": {"service": ["EC2"], "eventTypeCategory": ["scheduledChange"]}},
    "InterruptionStateChangeRule": {
        "source": ["aws.ec2"], "detail-type": ["EC2 Instance State-change Notification"],
        "detail": {"state": ["stopping", "stopped", "shutting-down", "terminated"]}},
    "InterruptionAsgLifecycleRule": {"source": ["aws.autoscaling"],
                                     "detail-type": ["EC2 Instance-terminate Lifecycle Action",
                                                     "EC2 Instance-launch Lifecycle Action"]},
}


def test_the_four_rules_have_exact_patterns_and_target_the_queue(demo: Synth) -> None:
    assert len(demo.of_type("AWS::Events::Rule")) == 5 == len(EVENT_PATTERNS)
    for prefix, pattern in RULES.items():
        _, rule = demo.one("AWS::Events::Rule", prefix)
        assert rule["Properties"]["EventPattern"] == pattern
        assert render(rule["Properties"]["Targets"]) == [{
            "Arn": "${InterruptionQueue.Arn}", "DeadLetterConfig": {"Arn": "${InterruptionDeadLetterQueue.Arn}"},
            "Id": "Target0"}]


def test_queue_is_encrypted_short_lived_and_redrives_to_an_alarmed_dlq(demo: Synth) -> None:
    _, queue = demo.one("AWS::SQS::Queue", "InterruptionQueue")
    props = render(queue["Properties"])
    assert props["MessageRetentionPeriod"] == 300
    assert props["SqsManagedSseEnabled"] is True
    assert props["VisibilityTimeout"] == demo.config.interruption.timeout_seconds + 10
    assert props["RedrivePolicy"] == {"deadLetterTargetArn": "${InterruptionDeadLetterQueue.Arn}",
                                      "maxReceiveCount": 3}
    _, dlq = demo.one("AWS::SQS::Queue", "InterruptionDeadLetterQueue")
    assert dlq["Properties"]["MessageRetentionPeriod"] == 14 * 86400
    assert dlq["Properties"]["SqsManagedSseEnabled"] is True
    _, alarm = demo.one("AWS::CloudWatch::Alarm", "MonitoringDeadLetterQueueNotEmptyAlarm")
    assert render(alarm["Properties"]["Dimensions"]) == [
        {"Name": "QueueName", "Value": "${InterruptionDeadLetterQueue.QueueName}"}]
    assert alarm["Properties"]["Threshold"] == 1


@pytest.mark.parametrize("queue", ["InterruptionQueuePolicy", "InterruptionDeadLetterQueuePolicy"])
def test_queue_policy_lets_only_our_rules_send_and_denies_plain_http(demo: Synth, queue: str) -> None:
    _, policy = demo.one("AWS::SQS::QueuePolicy", queue)
    statements = render(policy["Properties"]["PolicyDocument"]["Statement"])
    deny, *allows = statements
    assert deny["Effect"] == "Deny" and deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    sources = set()
    for allow in allows:
        assert allow["Effect"] == "Allow"
        assert allow["Principal"] == {"Service": "events.amazonaws.com"}
        assert "sqs:SendMessage" in allow["Action"]
        assert set(allow["Condition"]) == {"ArnEquals"}
        sources.add(allow["Condition"]["ArnEquals"]["aws:SourceArn"])
    assert sources == {f"${{{rule}.Arn}}" for rule in RULES}


def _function(synth: Synth, name: str) -> dict[str, Any]:
    _, function = synth.one("AWS::Lambda::Function", f"Functions{name.capitalize()}")
    return dict(render(function["Properties"]))


@pytest.mark.parametrize("name", ["provisioner", "interruption", "disruption"])
def test_functions_runtime_tracing_logs_and_powertools(demo: Synth, name: str) -> None:
    props = _function(demo, name)
    assert props["Handler"] == HANDLERS[name] == f"autoscaler.handlers.{name}.handler"
    # the runtime whose bytecode the asset ships (infra/bundling.py)
    assert props["Runtime"] == f"python{PYTHON_VERSION}" == "python3.13" and props["Architectures"] == ["arm64"]
    # X-Ray ($5 per million traces) only on the interruption function: the idle bill has no room for a
    # trace per safety pass or disruption pass (docs/cost.md)
    assert props.get("TracingConfig") == ({"Mode": "Active"} if name == "interruption" else None)
    assert props["Environment"]["Variables"].get("POWERTOOLS_TRACE_DISABLED") == (
        None if name == "interruption" else "true")
    env = props["Environment"]["Variables"]
    assert env["POWERTOOLS_SERVICE_NAME"] == mc.service_name("demo")
    assert env["POWERTOOLS_METRICS_NAMESPACE"] == mc.NAMESPACE
    log_group = props["LoggingConfig"]["LogGroup"].strip("${}")
    assert demo.resources[next(k for k in demo.resources if k.startswith(log_group))]["Properties"][
        "RetentionInDays"] == 30
    assert "VpcConfig" not in props
    assert props["MemorySize"] == {"provisioner": 1769, "interruption": 512, "disruption": 512}[name]


def test_provisioner_runs_alone_and_its_schedule_is_the_watchers_safety_pass(demo: Synth) -> None:
    # Given the demo (reaction: watcher) / Then the provisioner runs one pass per invocation, alone, and
    # on its own only every 10 minutes: the watcher wakes it for new pending pods
    props = _function(demo, "provisioner")
    assert props["ReservedConcurrentExecutions"] == 1
    assert demo.config.provisioner.mode == "watcher" and demo.config.provisioner.watch_seconds == 0
    assert props["Timeout"] == 60
    _, schedule = demo.one("AWS::Scheduler::Schedule", "FunctionsProvisionerSchedule")
    assert schedule["Properties"]["ScheduleExpression"] == "rate(10 minutes)"
    assert schedule["Properties"]["State"] == "ENABLED"
    assert render(schedule["Properties"]["Target"]["Arn"]) == "${FunctionsProvisioner.Arn}"
    assert schedule["Properties"]["Target"]["RetryPolicy"] == {"MaximumEventAgeInSeconds": 60,
                                                               "MaximumRetryAttempts": 0}
    demo.template.has_resource_properties("AWS::Lambda::EventInvokeConfig", {
        "FunctionName": Match.object_like({"Ref": Match.string_like_regexp("FunctionsProvisioner")}),
        "MaximumEventAgeInSeconds": 60, "MaximumRetryAttempts": 0})


def test_the_simulators_lambda_limits_are_the_templates(demo: Synth) -> None:
    # Given the synthesised demo / Then each function's reserved concurrency is the one infra/lambda_limits.py
    # gives the simulator (simulator/sim/platform.py), and so is the scheduled functions' maximum event age
    for name, reserved in RESERVED_CONCURRENCY.items():
        assert _function(demo, name).get("ReservedConcurrentExecutions") == reserved, name
    for config in demo.of_type("AWS::Lambda::EventInvokeConfig").values():
        assert config["Properties"]["MaximumEventAgeInSeconds"] == MAX_EVENT_AGE_SECONDS


def test_interruption_consumes_the_queue_with_partial_batch_responses(demo: Synth) -> None:
    mappings = list(demo.of_type("AWS::Lambda::EventSourceMapping").values())
    assert len(mappings) == 1
    props = render(mappings[0]["Properties"])
    assert props["EventSourceArn"] == "${InterruptionQueue.Arn}"
    assert props["FunctionName"] == "${FunctionsInterruption}"
    assert props["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert props["BatchSize"] == 10
    assert props["ScalingConfig"] == {"MaximumConcurrency": 10}
    assert "ReservedConcurrentExecutions" not in _function(demo, "interruption")


def test_disruption_is_scheduled_and_runs_alone(demo: Synth) -> None:
    assert _function(demo, "disruption")["ReservedConcurrentExecutions"] == 1
    _, schedule = demo.one("AWS::Scheduler::Schedule", "FunctionsDisruptionSchedule")
    assert schedule["Properties"]["ScheduleExpression"] == "rate(10 minutes)"
    assert render(schedule["Properties"]["Target"]["Arn"]) == "${FunctionsDisruption.Arn}"


def test_watcher_is_small_untraced_and_overlaps_its_next_run(demo: Synth) -> None:
    # Given the demo (reaction: watcher) / Then a 128 MB function without X-Ray starts every 10 minutes and
    # runs 3 s past the next start (plus the 3 s it keeps for its last wake-up); two may run at once
    props = _function(demo, "watcher")
    assert props["Handler"] == HANDLERS["watcher"] == "autoscaler.handlers.watcher.handler"
    assert props["MemorySize"] == 128 and props["Architectures"] == ["arm64"]
    assert "TracingConfig" not in props
    assert props["Timeout"] == 615 and props["ReservedConcurrentExecutions"] == 2
    assert props["Environment"]["Variables"] == {"AUTOSCALER_CLUSTER_NAME": "demo",
                                                 "AUTOSCALER_PROVISIONER_FUNCTION": "${FunctionsProvisioner}",
                                                 "AUTOSCALER_BATCH_IDLE_SECONDS": "0.5",
                                                 "AUTOSCALER_BATCH_MAX_SECONDS": "10"}
    _, schedule = demo.one("AWS::Scheduler::Schedule", "FunctionsWatcherSchedule")
    assert schedule["Properties"]["ScheduleExpression"] == "rate(10 minutes)"
    assert schedule["Properties"]["State"] == "ENABLED"
    assert render(schedule["Properties"]["Target"]["Arn"]) == "${FunctionsWatcher.Arn}"
    assert json.loads(schedule["Properties"]["Target"]["Input"]) == {"source": "schedule", "kind": "watcher"}


def test_watcher_errors_alarm_is_also_its_heartbeat(demo: Synth) -> None:
    # Given the watcher's one alarm / Then a failed run (never reached the API server) or no run at all in
    # 20 minutes (no Errors datapoint: missing data breaches) alarms
    alarm = _alarm(demo, "MonitoringWatcherErrorsAlarm")
    assert (alarm["MetricName"], alarm["Namespace"], alarm["Statistic"]) == ("Errors", "AWS/Lambda", "Sum")
    assert alarm["Period"] == 1200 and alarm["Threshold"] == 1 and alarm["EvaluationPeriods"] == 1
    assert alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    assert alarm["TreatMissingData"] == "breaching"
    # and it runs to its timeout by design: no near-timeout alarm
    assert not [k for k in demo.of_type("AWS::CloudWatch::Alarm") if k.startswith("MonitoringWatcherDuration")]


def test_full_config_puts_functions_in_the_vpc_and_applies_its_settings(full: Synth) -> None:
    assert "watcher" not in full.stack.functions.all  # type: ignore[attr-defined]  # watchMode: false
    for name in full.stack.functions.all:  # type: ignore[attr-defined]
        assert _function(full, name)["VpcConfig"] == {
            "SubnetIds": ["subnet-0123456789abcdef0", "subnet-0123456789abcdef1"],
            "SecurityGroupIds": ["sg-0123456789abcdef0"]}
    assert _function(full, "provisioner")["Timeout"] == 60  # watch mode off
    # memoryMb from the cluster file (the defaults: the provisioner's per reaction, 512 MB for interruption)
    assert {n: _function(full, n)["MemorySize"] for n in full.stack.functions.all} == {  # type: ignore[attr-defined]
        "provisioner": 256, "interruption": 512, "disruption": 512}
    _, schedule = full.one("AWS::Scheduler::Schedule", "FunctionsDisruptionSchedule")
    assert schedule["Properties"]["State"] == "DISABLED"
    assert schedule["Properties"]["ScheduleExpression"] == "cron(0/5 * * * ? *)"
    mapping = next(iter(full.of_type("AWS::Lambda::EventSourceMapping").values()))["Properties"]
    assert mapping["BatchSize"] == 5 and mapping["ScalingConfig"] == {"MaximumConcurrency": 4}
    assert {g["Properties"]["RetentionInDays"] for g in full.of_type("AWS::Logs::LogGroup").values()} == {90}
    full.template.has_resource_properties("AWS::SNS::Subscription",
                                          {"Protocol": "email", "Endpoint": "oncall@example.com"})
    for alarm in full.of_type("AWS::CloudWatch::Alarm").values():
        assert len(alarm["Properties"]["AlarmActions"]) == 1


def test_outputs(demo: Synth) -> None:
    outputs = render(demo.template.to_json()["Outputs"])
    assert outputs["InterruptionQueueArn"]["Value"] == "${InterruptionQueue.Arn}"
    for name in HANDLERS:
        assert outputs[f"{name.capitalize()}FunctionName"]["Value"] == f"${{Functions{name.capitalize()}}}"
    assert outputs["DashboardUrl"]["Value"] == ("https://us-west-2.console.aws.amazon.com/cloudwatch/home?"
                                                 "region=us-west-2#dashboards:name=${MonitoringDashboard}")


# --- monitoring ----------------------------------------------------------------------------------------

def _dashboard(synth: Synth) -> dict[str, Any]:
    _, dashboard = synth.one("AWS::CloudWatch::Dashboard", "MonitoringDashboard")
    body: dict[str, Any] = json.loads(render(dashboard["Properties"]["DashboardBody"]))
    return body


def _custom_metrics(body: dict[str, Any]) -> list[str]:
    names: list[str] = []
    for widget in body["widgets"]:
        for line in widget["properties"].get("metrics", []):
            if isinstance(line[0], dict):
                names += re.findall(r"\((\w+)\) FROM SCHEMA\(\"" + mc.NAMESPACE, line[0]["expression"])
            elif line[0] == mc.NAMESPACE:
                names.append(line[1])
    return names


def test_every_dashboard_metric_is_one_the_code_emits(demo: Synth) -> None:
    shown = _custom_metrics(_dashboard(demo))
    assert shown and set(shown) <= set(mc.CATALOGUE)


def test_dashboard_shows_what_the_issue_asks_for(demo: Synth) -> None:
    body = _dashboard(demo)
    shown = set(_custom_metrics(body))
    assert {"PendingPods", "NodesLaunched", "LaunchFailures", "PlanSeconds", "PodToLaunchSeconds",
            "InterruptionEvents", "DrainSeconds", "EvictionsBlockedByPDB", "ManagedHourlyCost"} <= shown
    text = json.dumps(body)
    for grouping in ("GROUP BY InstanceType", "GROUP BY CapacityType", "GROUP BY Zone", "GROUP BY Reason",
                     "GROUP BY Kind, Action"):
        assert grouping in text
    for aws_metric in ('"AWS/SQS", "ApproximateNumberOfMessagesVisible"', '"AWS/Lambda", "Errors"',
                       '"AWS/Lambda", "Duration"', '"AWS/Lambda", "Throttles"'):
        assert aws_metric in text


def _widget(body: dict[str, Any], title: str) -> dict[str, Any]:
    matches = [w for w in body["widgets"] if w["properties"].get("title") == title]
    assert len(matches) == 1, f"no single widget titled {title!r}"
    props: dict[str, Any] = matches[0]["properties"]
    return props


@pytest.mark.parametrize(("title", "metric", "group_by"), [
    ("Nodes by NodePool and capacity type", "Nodes", "NodePool, CapacityType"),
    ("Cost per hour (USD) by NodePool and capacity type", "HourlyCost", "NodePool, CapacityType"),
    ("Nodes created by NodePool", "NodesLaunched", "NodePool"),
    ("Nodes terminated by NodePool", "NodesTerminated", "NodePool"),
])
def test_fleet_widgets_group_by_node_pool(demo: Synth, title: str, metric: str, group_by: str) -> None:
    # Given the demo stack's dashboard, When the fleet widget is read, Then it queries that metric by pool
    expression = _widget(_dashboard(demo), title)["metrics"][0][0]["expression"]
    assert f"MAX({metric})" in expression or f"SUM({metric})" in expression
    assert expression.endswith(f"GROUP BY {group_by}")


@pytest.mark.parametrize(("title", "metrics"), [
    ("Nodes cordoned or draining, and the oldest drain (s)", {"NodesDraining", "LongestDrainSeconds"}),
    ("Never-registered instances and provisioner passes", {"InstancesNeverRegistered", "PassesSucceeded"}),
])
def test_fleet_gauges_are_on_the_dashboard(demo: Synth, title: str, metrics: set[str]) -> None:
    widget = _widget(_dashboard(demo), title)
    assert set(_custom_metrics({"widgets": [{"properties": widget}]})) == metrics


def test_spot_share_is_computed_from_the_nodes_gauge(demo: Synth) -> None:
    # Given the demo stack's dashboard, When the spot share widget is read
    expression = _widget(_dashboard(demo), "Spot share of nodes (%)")["metrics"][0][0]["expression"]
    # Then it divides this cluster's spot Nodes by all its Nodes, summed over the NodePools' series:
    # no metric of its own (CloudWatch bills each metric by the hour)
    spot, fleet = expression.removeprefix("100 * ").split(" / ")
    for search in (spot, fleet):
        assert search.startswith("SUM(SEARCH('{EKSServerlessAutoscaler,NodePool,CapacityType,service} "
                                 'MetricName="Nodes" service="eks-autoscaler-demo"')
        assert search.endswith("', 'Maximum', 60))")
    assert 'CapacityType="spot"' in spot and "CapacityType" not in fleet.split("}")[1]
    assert "SpotShare" not in mc.CATALOGUE


def test_lambda_and_queue_health_widgets(demo: Synth) -> None:
    body = _dashboard(demo)
    duration = _widget(body, "Lambda duration (max) against timeout (ms)")
    # One line per function, each against a horizontal line at its timeout
    assert [m[1] for m in duration["metrics"]] == ["Duration"] * 4
    timeouts = {a["label"]: a["value"] for a in duration["annotations"]["horizontal"]}
    assert timeouts == {"provisioner timeout": 60_000, "interruption timeout": 120_000,
                        "disruption timeout": 300_000, "watcher timeout": 615_000}
    dropped = _widget(body, "Lambda async events dropped")
    assert [m[:2] for m in dropped["metrics"]] == [["AWS/Lambda", "AsyncEventsDropped"]] * 2
    age = _widget(body, "Interruption queue: oldest message (s)")
    assert age["metrics"][0][:2] == ["AWS/SQS", "ApproximateAgeOfOldestMessage"]


def test_grouped_queries_use_each_metrics_full_dimension_set(demo: Synth) -> None:
    for expression in re.findall(r'SELECT [^"]+\((\w+)\) FROM SCHEMA\(\\?"[^"\\]+\\?", ([\w, ]+)\)',
                                 json.dumps(_dashboard(demo))):
        name, schema = expression
        assert schema.split(", ") == [mc.SERVICE_DIMENSION, *mc.CATALOGUE[name].dimensions]


def test_alarms_read_catalogue_metrics(demo: Synth) -> None:
    alarms = {k: v["Properties"] for k, v in demo.of_type("AWS::CloudWatch::Alarm").items()}
    assert len(alarms) == 15  # with the watcher's errors-and-heartbeat alarm
    custom = [m["MetricStat"]["Metric"] for a in alarms.values() for m in a.get("Metrics", [])]
    assert {m["MetricName"] for m in custom} == {"UnschedulablePods", "PricesStale", "NodesOfRemovedNodePool",
                                                 "PassesSucceeded"} <= set(mc.CATALOGUE)
    assert all(m["Namespace"] == mc.NAMESPACE for m in custom)
    unschedulable = next(a for k, a in alarms.items() if k.startswith("MonitoringPodsUnschedulable"))
    assert unschedulable["EvaluationPeriods"] * unschedulable["Metrics"][0]["MetricStat"]["Period"] == 600
    errors = [a for k, a in alarms.items() if "ErrorsAlarm" in k]
    assert len(errors) == 4 and all(a["MetricName"] == "Errors" for a in errors)


def _alarm(synth: Synth, prefix: str) -> dict[str, Any]:
    _, alarm = synth.one("AWS::CloudWatch::Alarm", prefix)
    props: dict[str, Any] = alarm["Properties"]
    return props


def test_heartbeat_alarm_fires_when_no_pass_succeeds_for_two_safety_periods_and_on_missing_data(
        demo: Synth, full: Synth) -> None:
    # Given the provisioner's heartbeat alarm, Then: fewer than 1 successful pass in two safety-pass periods
    # (20 minutes with the watcher's 10-minute safety pass; 5 minutes with a 1-minute schedule), with no
    # data at all (the function never ran) counted as breaching
    heartbeat = _alarm(demo, "MonitoringProvisionerHeartbeatAlarm")
    stat = heartbeat["Metrics"][0]["MetricStat"]
    assert stat["Metric"]["MetricName"] == "PassesSucceeded" and stat["Stat"] == "Sum" and stat["Period"] == 1200
    full_stat = _alarm(full, "MonitoringProvisionerHeartbeatAlarm")["Metrics"][0]["MetricStat"]
    assert full_stat["Period"] == 300
    assert heartbeat["ComparisonOperator"] == "LessThanThreshold" and heartbeat["Threshold"] == 1
    assert heartbeat["TreatMissingData"] == "breaching" and heartbeat["EvaluationPeriods"] == 1


@pytest.mark.parametrize(("name", "timeout"), [("Provisioner", 60), ("Interruption", 120), ("Disruption", 300)])
def test_duration_near_timeout_alarm_per_function(demo: Synth, name: str, timeout: int) -> None:
    alarm = _alarm(demo, f"Monitoring{name}DurationNearTimeoutAlarm")
    assert alarm["MetricName"] == "Duration" and alarm["Namespace"] == "AWS/Lambda"
    assert alarm["Statistic"] == "Maximum" and alarm["Threshold"] == 0.9 * timeout * 1000
    assert alarm["TreatMissingData"] == "notBreaching"


@pytest.mark.parametrize("name", ["Provisioner", "Disruption"])
def test_async_events_dropped_alarm_for_asynchronously_invoked_functions(demo: Synth, name: str) -> None:
    alarm = _alarm(demo, f"Monitoring{name}AsyncEventsDroppedAlarm")
    assert (alarm["MetricName"], alarm["Namespace"], alarm["Statistic"]) == ("AsyncEventsDropped", "AWS/Lambda", "Sum")
    assert alarm["Threshold"] == 1 and alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"


def test_interruption_queue_age_alarm(demo: Synth) -> None:
    alarm = _alarm(demo, "MonitoringInterruptionQueueAgeAlarm")
    assert alarm["MetricName"] == "ApproximateAgeOfOldestMessage" and alarm["Namespace"] == "AWS/SQS"
    assert alarm["Threshold"] == 120 and alarm["Statistic"] == "Maximum"


# --- cdk-nag and cfn-lint ---------------------------------------------------------------------------------

@pytest.mark.parametrize("synth_name", ["demo", "full"])
def test_cdk_nag_aws_solutions_has_no_unsuppressed_findings(synth_name: str, request: pytest.FixtureRequest) -> None:
    synth: Synth = request.getfixturevalue(synth_name)
    pattern = Match.string_like_regexp("AwsSolutions-.*")
    findings = synth.annotations.find_error("*", pattern) + synth.annotations.find_warning("*", pattern)
    assert [f"{f.id}: {str(f.entry.data)[:120]}" for f in findings] == []


def test_every_nag_suppression_has_a_reason(demo: Synth) -> None:
    suppressions = [s for resource in demo.resources.values()
                    for s in resource.get("Metadata", {}).get("cdk_nag", {}).get("rules_to_suppress", [])]
    assert suppressions
    assert all(len(s["reason"]) >= 40 for s in suppressions)


@pytest.mark.parametrize("synth_name", ["demo", "full"])
def test_cfn_lint_passes(synth_name: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    synth: Synth = request.getfixturevalue(synth_name)
    template = tmp_path / "template.json"
    template.write_text(json.dumps(synth.template.to_json()))
    matches = lint_file(template)
    assert [f"{m.rule.id} {m.message}" for m in matches] == []
