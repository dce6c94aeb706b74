"""The Lambda platform as deployed, for a scenario run: which schedules invoke the functions, how pending
pods reach the provisioner, and each function's reserved concurrency, async-queue event age and timeout.

Defaults come from where the deployment takes them: the cluster file (``provisioner.reaction`` and
``schedule`` — the reaction's default schedule when unset —, ``batchIdleSeconds`` / ``batchMaxSeconds``,
``disruption.schedule`` and ``enabled``, each function's timeout) and the stack's own settings
(``infra/lambda_limits.py``: reserved concurrency, the 60 s maximum event age of scheduled functions).
A scenario's explicit ``provisioner:`` block or ``settings:`` periods and timeout override them.

The interruption function is unreserved, as the stack deploys it: its concurrency is its SQS event
source's (several batches at once, up to ``interruption.maxConcurrency``; ``sim/interruption.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from autoscaler.config import DEFAULT_PROVISIONER_SCHEDULE, ClusterConfig
from autoscaler.domain.schedule_expression import rate_seconds
from infra.lambda_limits import MAX_EVENT_AGE_SECONDS, RESERVED_CONCURRENCY, SCHEDULED_FUNCTIONS
from simulator.sim.engine import Function
from simulator.sim.scenario import Scenario

# A cron schedule (``cron(...)``) has no fixed period; the simulation then runs the function this often.
CRON_FALLBACK_SECONDS = 60.0


@dataclass(frozen=True)
class Platform:
    reaction: str  # scheduled | watch | watcher
    batch_idle_seconds: float
    batch_max_seconds: float
    provisioner_period: float
    provisioner_schedule: str  # what was used, as the summary reports it
    disruption_period: float | None  # None: disruption disabled
    disruption_schedule: str
    functions: dict[str, Function]

    @property
    def watch_trigger(self) -> bool:
        """Pending pods wake the provisioner (the watcher function, or its own watch)."""
        return self.reaction in ("watch", "watcher")

    def schedules(self) -> dict[str, str]:
        return {"provisioner": self.provisioner_schedule, "disruption": self.disruption_schedule,
                "reaction": self.reaction}


def _period(expression: str) -> float:
    seconds = rate_seconds(expression)
    return float(seconds) if seconds is not None else CRON_FALLBACK_SECONDS


def _described(expression: str, override: float | None) -> str:
    if override is not None:
        return f"every {override:g} s (scenario setting)"
    if rate_seconds(expression) is None:
        return f"{expression} (run every {CRON_FALLBACK_SECONDS:g} s)"
    return expression


def platform_for(scenario: Scenario, config: ClusterConfig) -> Platform:
    """The platform a run of ``scenario`` on ``config`` simulates (see the module docstring)."""
    s, mode, prov, dis = scenario.settings, scenario.provisioner, config.provisioner, config.disruption
    reaction = mode.mode or prov.mode
    # The cluster file's schedule, else the default of the reaction in effect (as the stack's would be).
    prov_expr = prov.schedule or DEFAULT_PROVISIONER_SCHEDULE[reaction]
    timeouts = {"provisioner": float(prov.timeout_seconds), "disruption": float(dis.timeout_seconds),
                "interruption": float(config.interruption.timeout_seconds)}
    if s.lambda_timeout_seconds is not None:
        timeouts["provisioner"] = timeouts["disruption"] = s.lambda_timeout_seconds
    functions = {
        name: Function(concurrency=RESERVED_CONCURRENCY[name],
                       max_event_age=float(MAX_EVENT_AGE_SECONDS) if name in SCHEDULED_FUNCTIONS else None,
                       timeout=timeouts[name])
        for name in ("provisioner", "disruption", "interruption")}
    return Platform(
        reaction=reaction,
        batch_idle_seconds=mode.batch_idle_seconds if mode.batch_idle_seconds is not None
        else prov.batch_idle_seconds,
        batch_max_seconds=mode.batch_max_seconds if mode.batch_max_seconds is not None else prov.batch_max_seconds,
        provisioner_period=s.provisioner_period_seconds if s.provisioner_period_seconds is not None
        else _period(prov_expr),
        provisioner_schedule=_described(prov_expr, s.provisioner_period_seconds),
        disruption_period=None if not dis.enabled else (
            s.disruption_period_seconds if s.disruption_period_seconds is not None else _period(dis.schedule)),
        disruption_schedule="disabled" if not dis.enabled else _described(dis.schedule,
                                                                           s.disruption_period_seconds),
        functions=functions,
    )
