"""Monthly running cost at list prices (no free tier), derived from the synthesised template.

The stack is synthesised from a cluster file (``Template.from_stack``, asset not bundled) or read from a
``cdk.out`` template: memory sizes, timeouts, tracing, schedules (and whether enabled), the alarm and
dashboard counts and the SQS event source come from it; the custom-metric count from the metric
catalogue, with the dimension values the cluster file gives (NodePools, their limits). Invocation
durations are inputs: the idle provisioner pass and disruption run default to the figures measured by
``benchmarks/idle_pass.py`` and recorded in ``benchmarks/results/idle-pass.json`` (``--measure`` measures
them again now); others can be passed (``--provisioner-busy-pass-seconds`` ...). Prints ONE JSON object:
each option's idle and busy bill, itemised, and
whether it meets the targets (idle compute <= $5/month, whole idle bill <= $12/month).

    python benchmarks/cost.py [--cluster clusters/demo.yaml] [--template cdk.out/X.template.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "functions"), str(ROOT)]

from autoscaler import metrics_catalog as mc  # noqa: E402
from autoscaler.config import (  # noqa: E402
    DEFAULT_PROVISIONER_MEMORY_MB,
    DEFAULT_PROVISIONER_SCHEDULE,
    ClusterConfig,
    load_cluster_config,
    rate_seconds,
)
from autoscaler.watcher_settings import END_RESERVE_SECONDS  # noqa: E402

# --- list prices (us-east-1, USD) -------------------------------------------------------------------------
HOURS_PER_MONTH = 730
LAMBDA_GB_SECOND_ARM = 0.0000133334
LAMBDA_REQUEST = 0.20 / 1e6
SCHEDULER_INVOCATION = 1.00 / 1e6
SQS_REQUEST = 0.40 / 1e6
XRAY_TRACE = 5.00 / 1e6
LOGS_INGESTED_GB = 0.50
METRIC_MONTH = 0.30
DASHBOARD_MONTH = 3.00
ALARM_STANDARD_MONTH = 0.10

# Lambda's SQS event source long-polls with 5 connections at a 20 s wait while the queue is empty.
SQS_POLLERS, SQS_WAIT_SECONDS = 5, 20
# What one invocation writes to CloudWatch Logs (bytes), measured from the handlers' output: the decision
# log line, the EMF documents (plain metrics in one, each dimensioned metric in its own) and Lambda's
# START/END/REPORT lines.
PLATFORM_LOG_BYTES = 350
DECISION_LOG_BYTES = 1_200
EMF_PLAIN_BYTES = 900
EMF_DIMENSIONED_BYTES = 330
# The watcher's one summary line per invocation (handlers/watcher.py), with Lambda's JSON wrapping.
WATCHER_LOG_BYTES = 300

# Metrics an idle pass writes (app/pass_metrics.py writes zero-valued gauges not at all), and those a busy
# month adds for every hour (counted all month: an upper bound).
IDLE_GAUGES = (mc.PASSES_SUCCEEDED, mc.MANAGED_HOURLY_COST)
BUSY_GAUGES = (mc.PENDING_PODS, mc.UNSCHEDULABLE_PODS, mc.PODS_NOMINATED, mc.PLAN_SECONDS, mc.NODES_DRAINING,
               mc.LONGEST_DRAIN_SECONDS)


MEASURED = ROOT / "benchmarks" / "results" / "idle-pass.json"


def _measured(function: str, fallback: float) -> float:
    """The hour's mean duration of an idle run of ``function`` recorded by benchmarks/idle_pass.py."""
    try:
        return float(json.loads(MEASURED.read_text())[function]["mean_lambda_seconds"])
    except (OSError, ValueError, KeyError, TypeError):
        return fallback


@dataclass
class Inputs:
    """Durations and activity the template cannot tell (seconds, counts per month)."""

    # One idle scheduled pass / disruption run at 1,024 MB, measured (benchmarks/idle_pass.py).
    provisioner_pass_seconds: float = field(default_factory=lambda: _measured("provisioner", 1.0))
    provisioner_busy_pass_seconds: float = 2.5
    disruption_run_seconds: float = field(default_factory=lambda: _measured("disruption", 1.0))
    disruption_busy_run_seconds: float = 3.0
    busy_interruptions: int = 300  # interruption messages per month
    interruption_seconds: float = 30.0  # a drain
    busy_watch_passes_per_minute: float = 0.5  # watch passes on top of the scheduled one
    busy_sparse_metric_hours: int = 400  # hours/month in which launch/interruption metrics get data
    busy_sparse_metrics: int = 12  # distinct dimensioned series of those (types x zones x reasons)
    capacity_types: int = 2


@dataclass
class Stack:
    functions: dict[str, dict[str, Any]]
    schedules: dict[str, dict[str, Any]]
    alarms: int
    dashboards: int
    event_source_mappings: int
    config: ClusterConfig


@dataclass
class Bill:
    items: dict[str, float] = field(default_factory=dict)

    def add(self, name: str, usd: float) -> None:
        self.items[name] = round(self.items.get(name, 0.0) + usd, 4)

    def total(self, *names: str) -> float:
        return round(sum(v for k, v in self.items.items() if not names or k.split(":")[0] in names), 2)


COMPUTE = ("lambda", "requests", "scheduler", "sqs", "logs", "xray")


def read_stack(*, cluster: Path, template: Path | None) -> Stack:
    config = load_cluster_config(cluster)
    if template is not None:
        resources = json.loads(template.read_text())["Resources"]
    else:
        import aws_cdk as cdk  # noqa: PLC0415 - only when synthesising
        from aws_cdk.assertions import Template  # noqa: PLC0415

        from infra.app import build_app  # noqa: PLC0415

        context = json.loads((ROOT / "cdk.json").read_text())["context"]
        app = build_app(cdk.App(context={**context, "skipBundling": "true", "configFile": str(cluster),
                                         "cluster": cluster.stem}))
        stack = next(c for c in app.node.children if isinstance(c, cdk.Stack))
        resources = Template.from_stack(stack).to_json()["Resources"]
    by_type: dict[str, dict[str, Any]] = {}
    for logical, resource in resources.items():
        by_type.setdefault(resource["Type"], {})[logical] = resource.get("Properties", {})
    functions: dict[str, dict[str, Any]] = {}
    for logical, props in by_type.get("AWS::Lambda::Function", {}).items():
        module = str(props.get("Handler", "")).split(".")[-2]
        functions[module] = {"logicalId": logical, "memoryMb": props["MemorySize"], "timeout": props["Timeout"],
                             "tracing": (props.get("TracingConfig") or {}).get("Mode"),
                             "architectures": props.get("Architectures")}
    names = {f["logicalId"]: name for name, f in functions.items()}
    schedules: dict[str, dict[str, Any]] = {}
    for props in by_type.get("AWS::Scheduler::Schedule", {}).values():
        target = props["Target"]["Arn"]
        logical = target["Fn::GetAtt"][0] if isinstance(target, dict) else ""
        schedules[names.get(logical, logical)] = {"expression": props["ScheduleExpression"],
                                                  "enabled": props.get("State", "ENABLED") == "ENABLED"}
    return Stack(functions=functions, schedules=schedules, alarms=len(by_type.get("AWS::CloudWatch::Alarm", {})),
                 dashboards=len(by_type.get("AWS::CloudWatch::Dashboard", {})),
                 event_source_mappings=len(by_type.get("AWS::Lambda::EventSourceMapping", {})), config=config)


def _per_month(expression: str) -> float:
    seconds = rate_seconds(expression)
    if seconds is None:
        raise ValueError(f"{expression!r}: only rate(...) schedules are costed")
    return HOURS_PER_MONTH * 3600 / seconds


def _gb_s(memory_mb: int, seconds: float, count: float) -> float:
    return memory_mb / 1024 * seconds * count * LAMBDA_GB_SECOND_ARM


def _pass_log_bytes(series: int) -> int:
    return PLATFORM_LOG_BYTES + DECISION_LOG_BYTES + EMF_PLAIN_BYTES + EMF_DIMENSIONED_BYTES * series


def metric_series(stack: Stack, inputs: Inputs, *, busy: bool = False) -> dict[str, int]:
    """Custom metrics billed all month: the idle gauges, and per NodePool the fleet gauges (by capacity
    type) and NodePoolUsage (by limited resource); busy adds the pod and drain gauges."""
    pools = stack.config.node_pools
    limited = sum(len((p.get("spec") or {}).get("limits") or {}) for p in pools)
    series = {"idleGauges": len(IDLE_GAUGES), "nodesByPool": len(pools) * inputs.capacity_types,
              "hourlyCostByPool": len(pools) * inputs.capacity_types, "nodePoolUsage": limited}
    if busy:
        series["busyGauges"] = len(BUSY_GAUGES)
    return series


def _watcher_function(stack: Stack) -> tuple[dict[str, Any], str]:
    """The watcher and its schedule as synthesised, or (a template without one) as the stack would build them."""
    if "watcher" in stack.functions:
        return stack.functions["watcher"], stack.schedules["watcher"]["expression"]
    from infra.functions import WATCHER_MEMORY_MB, WATCHER_SCHEDULE, WATCHER_TIMEOUT_SECONDS  # noqa: PLC0415

    return {"memoryMb": WATCHER_MEMORY_MB, "timeout": WATCHER_TIMEOUT_SECONDS, "tracing": None}, WATCHER_SCHEDULE


def bill(stack: Stack, inputs: Inputs, *, option: str, busy: bool) -> Bill:
    """One option's month. Options: ``watcher`` (a 128 MB watcher function that invokes the planner only
    when pods go pending, plus a safety pass on the provisioner's schedule), ``watch`` (the planner keeps
    its own watch open, 1-minute schedule), ``watch256`` (the same at 256 MB), ``scheduled`` (a pass per
    minute, nothing else). The template's reaction is costed as deployed; the others as the stack would
    build them (their default schedules and the provisioner's memory per reaction), with the template's other
    memory sizes."""
    b = Bill()
    cfg = stack.config.provisioner
    prov, disr = stack.functions["provisioner"], stack.functions["disruption"]
    pass_s = inputs.provisioner_busy_pass_seconds if busy else inputs.provisioner_pass_seconds
    series = metric_series(stack, inputs, busy=busy)
    dimensioned = series["nodesByPool"] + series["hourlyCostByPool"] + series["nodePoolUsage"]
    extra_passes = inputs.busy_watch_passes_per_minute * HOURS_PER_MONTH * 60 if busy else 0.0
    deployed = cfg.mode == option.removesuffix("256")
    expression = stack.schedules["provisioner"]["expression"] if deployed else \
        DEFAULT_PROVISIONER_SCHEDULE[option.removesuffix("256")]
    runs = _per_month(expression)
    # The deployed reaction at the template's memory; another at the cluster file's memoryMb, else its default.
    memory = prov["memoryMb"] if deployed else (cfg.memory_mb
                                                or DEFAULT_PROVISIONER_MEMORY_MB[option.removesuffix("256")])
    if option in ("watch", "watch256"):
        memory = 256 if option == "watch256" else memory
        seconds = min(float(rate_seconds(expression) or 60), 900.0) - cfg.watch_margin_seconds + pass_s
        _invoked(b, "provisioner", memory_mb=memory, seconds=seconds, invocations=runs, scheduled=runs)
        passes, traces = runs + extra_passes, runs
    elif option == "scheduled":
        _invoked(b, "provisioner", memory_mb=memory, seconds=pass_s, invocations=runs, scheduled=runs)
        passes, traces = runs, runs
    elif option == "watcher":
        # One watcher invocation per period, each watching until END_RESERVE_SECONDS before its timeout (the
        # period plus the overlap); the planner runs on wake-ups and on the safety schedule.
        watcher, watcher_schedule = _watcher_function(stack)
        _scheduled_function(b, "watcher", watcher, seconds=watcher["timeout"] - END_RESERVE_SECONDS,
                            runs=_per_month(watcher_schedule), log_bytes=PLATFORM_LOG_BYTES + WATCHER_LOG_BYTES)
        _invoked(b, "provisioner", memory_mb=memory, seconds=pass_s, invocations=runs + extra_passes,
                 scheduled=runs)
        passes, traces = runs + extra_passes, runs + extra_passes
    else:
        raise ValueError(option)
    b.add("logs:provisioner", passes * _pass_log_bytes(dimensioned) / 1e9 * LOGS_INGESTED_GB)
    if prov["tracing"] == "Active":
        b.add("xray:provisioner", traces * XRAY_TRACE)
    if stack.schedules.get("disruption", {}).get("enabled"):
        _scheduled_function(b, "disruption", disr,
                            seconds=inputs.disruption_busy_run_seconds if busy else inputs.disruption_run_seconds,
                            runs=_per_month(stack.schedules["disruption"]["expression"]),
                            log_bytes=PLATFORM_LOG_BYTES + EMF_PLAIN_BYTES)
    polls = stack.event_source_mappings * SQS_POLLERS * HOURS_PER_MONTH * 3600 / SQS_WAIT_SECONDS
    b.add("sqs:polling", polls * SQS_REQUEST)
    if busy:
        intr = stack.functions["interruption"]
        b.add("lambda:interruption", _gb_s(intr["memoryMb"], inputs.interruption_seconds, inputs.busy_interruptions))
        b.add("requests:interruption", inputs.busy_interruptions * LAMBDA_REQUEST)
        b.add("sqs:messages", inputs.busy_interruptions * 3 * SQS_REQUEST)  # send, receive, delete
        b.add("xray:interruption", inputs.busy_interruptions * XRAY_TRACE)
        b.add("metrics:sparse", inputs.busy_sparse_metrics * inputs.busy_sparse_metric_hours / HOURS_PER_MONTH
              * METRIC_MONTH)
    b.add("metrics:gauges", sum(series.values()) * METRIC_MONTH)
    b.add("dashboard", stack.dashboards * DASHBOARD_MONTH)
    b.add("alarms", stack.alarms * ALARM_STANDARD_MONTH)
    return b


def _invoked(b: Bill, name: str, *, memory_mb: int, seconds: float, invocations: float, scheduled: float) -> None:
    """A function's duration and requests over ``invocations`` a month, ``scheduled`` of them by the Scheduler."""
    b.add(f"lambda:{name}", _gb_s(memory_mb, seconds, invocations))
    b.add(f"requests:{name}", invocations * LAMBDA_REQUEST)
    b.add(f"scheduler:{name}", scheduled * SCHEDULER_INVOCATION)


def _scheduled_function(b: Bill, name: str, fn: dict[str, Any], *, seconds: float, runs: float,
                        log_bytes: float) -> None:
    """A function run only by its schedule: duration, requests, Scheduler, ``log_bytes`` per run, and a
    trace per run when its tracing is Active."""
    _invoked(b, name, memory_mb=fn["memoryMb"], seconds=seconds, invocations=runs, scheduled=runs)
    b.add(f"logs:{name}", runs * log_bytes / 1e9 * LOGS_INGESTED_GB)
    if fn["tracing"] == "Active":
        b.add(f"xray:{name}", runs * XRAY_TRACE)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cluster", type=Path, default=ROOT / "clusters" / "demo.yaml")
    parser.add_argument("--template", type=Path, help="a synthesised template (cdk.out/*.template.json)")
    parser.add_argument("--measure", action="store_true",
                        help="measure the idle pass and run durations now (benchmarks/idle_pass.py, ~1 minute)")
    for name, value in vars(Inputs()).items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=None)
    args = parser.parse_args(argv)
    given = {k: getattr(args, k) for k in vars(Inputs()) if getattr(args, k) is not None}
    if args.measure:
        from benchmarks.idle_pass import measure  # noqa: PLC0415 - starts the simulator: only when asked

        found = measure()
        given.setdefault("provisioner_pass_seconds", found["provisioner"]["mean_lambda_seconds"])
        given.setdefault("disruption_run_seconds", found["disruption"]["mean_lambda_seconds"])
    inputs = Inputs(**given)
    stack = read_stack(cluster=args.cluster, template=args.template)
    options: dict[str, Any] = {}
    for option in ("watcher", "watch", "scheduled", "watch256"):
        idle, busy = bill(stack, inputs, option=option, busy=False), bill(stack, inputs, option=option, busy=True)
        options[option] = {
            "idle": {"computeUsd": idle.total(*COMPUTE), "totalUsd": idle.total(), "items": idle.items},
            "busy": {"computeUsd": busy.total(*COMPUTE), "totalUsd": busy.total(), "items": busy.items},
            "meetsIdleTargets": idle.total(*COMPUTE) <= 5.0 and idle.total() <= 12.0,
        }
    print(json.dumps({
        "prices": {"lambdaGbSecondArm64": LAMBDA_GB_SECOND_ARM, "lambdaRequest": LAMBDA_REQUEST,
                   "schedulerInvocation": SCHEDULER_INVOCATION, "sqsRequest": SQS_REQUEST, "xrayTrace": XRAY_TRACE,
                   "logsIngestedGb": LOGS_INGESTED_GB, "metricMonth": METRIC_MONTH, "dashboardMonth": DASHBOARD_MONTH,
                   "alarmMonth": ALARM_STANDARD_MONTH, "hoursPerMonth": HOURS_PER_MONTH, "freeTier": False},
        "template": {"functions": stack.functions, "schedules": stack.schedules, "alarms": stack.alarms,
                     "dashboards": stack.dashboards, "eventSourceMappings": stack.event_source_mappings,
                     "reaction": stack.config.provisioner.mode,
                     "customMetrics": metric_series(stack, inputs)},
        "inputs": vars(inputs),
        "options": options,
        "targets": {"idleComputeUsd": 5.0, "idleTotalUsd": 12.0},
    }, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
