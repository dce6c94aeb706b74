"""The virtual Lambda platform as deployed (simulator/sim/platform.py, simulator/sim/engine.py): schedules
and batching from the cluster file unless the scenario overrides them, reserved concurrency with the
async-invoke queue and its maximum event age, and timeouts in virtual time."""

from __future__ import annotations

from typing import Any

import pytest
from moto.server import ThreadedMotoServer

from infra.lambda_limits import RESERVED_CONCURRENCY
from simulator.local import Catalog
from simulator.sim.engine import EventLoop, Function
from simulator.sim.platform import platform_for
from simulator.sim.report import summary
from simulator.sim.runner import run_scenario
from simulator.sim.scenario import Scenario

pytestmark = pytest.mark.e2e


def _scenario(**extra: Any) -> Scenario:
    return Scenario.model_validate({"name": "platform", "cluster": "clusters/demo.yaml", **extra})


# (what, scenario fields, reaction, provisioner period, disruption period, batch idle / max; None: the
# cluster file's own, i.e. ProvisionerConfig's defaults)
PLATFORMS: list[tuple[str, dict[str, Any], str, float, float | None, tuple[float | None, float | None]]] = [
    ("the demo as deployed: the watcher, a 10-minute safety pass, disruption every 10 minutes",
     {}, "watcher", 600, 600, (None, None)),
    ("the cluster file's reaction: scheduled, its default rate(1 minute)",
     {"config": {"provisioner": {"reaction": "scheduled"}}}, "scheduled", 60, 600, (None, None)),
    ("the cluster file's batching window and disruption schedule",
     {"config": {"provisioner": {"reaction": "watch", "batchIdleSeconds": 2, "batchMaxSeconds": 20},
                 "disruption": {"schedule": "rate(5 minutes)"}}}, "watch", 60, 300, (2, 20)),
    ("disruption disabled: no disruption schedule",
     {"config": {"disruption": {"enabled": False}}}, "watcher", 600, None, (None, None)),
    ("explicit scenario overrides win",
     {"provisioner": {"mode": "scheduled", "batchIdleSeconds": 3},
      "settings": {"provisionerPeriodSeconds": 30, "disruptionPeriodSeconds": 90}}, "scheduled", 30, 90, (3, None)),
]


@pytest.mark.parametrize("case", PLATFORMS, ids=[p[0] for p in PLATFORMS])
def test_schedules_and_batching_follow_the_cluster_file_unless_overridden(
        case: tuple[str, dict[str, Any], str, float, float | None, tuple[float | None, float | None]]) -> None:
    what, fields, reaction, prov, dis, (idle, most) = case
    # Given a scenario on the demo cluster file (with the overrides of the case)
    scenario = _scenario(**fields)
    config = scenario.cluster_config()
    window = (config.provisioner.batch_idle_seconds if idle is None else idle,
              config.provisioner.batch_max_seconds if most is None else most)
    # When its platform is resolved
    p = platform_for(scenario, config)
    # Then the reaction, schedules and batching window are the deployment's, or the scenario's overrides
    assert (p.reaction, p.provisioner_period, p.disruption_period) == (reaction, prov, dis), what
    assert (p.batch_idle_seconds, p.batch_max_seconds) == window, what


def test_functions_get_the_stacks_reserved_concurrency_event_age_and_timeouts() -> None:
    # Given the demo cluster file
    scenario = _scenario(config={"disruption": {"timeoutSeconds": 120}})
    # When its platform is resolved
    f = platform_for(scenario, scenario.cluster_config()).functions
    # Then provisioner and disruption run as the stack reserves them, scheduled ones drop stale events
    assert f["provisioner"].concurrency == RESERVED_CONCURRENCY["provisioner"] == 1
    assert f["disruption"].concurrency == RESERVED_CONCURRENCY["disruption"] == 1
    assert f["provisioner"].max_event_age == f["disruption"].max_event_age == 60
    assert f["interruption"].max_event_age is None  # fed by SQS, not the async queue
    # And each function's timeout is the cluster file's
    assert (f["provisioner"].timeout, f["disruption"].timeout, f["interruption"].timeout) == (60, 120, 120)


def _loop(**functions: Function) -> tuple[EventLoop, list[tuple[float, str]]]:
    loop = EventLoop(epoch=0.0)
    loop.functions = dict(functions)
    return loop, []


def test_an_invocation_waits_for_a_free_slot_and_is_dropped_past_the_maximum_event_age() -> None:
    # Given a function reserved to one invocation, whose events live 60 s in the async queue
    loop, seen = _loop(provisioner=Function(concurrency=1, max_event_age=60))

    def long_pass() -> None:
        seen.append((loop.now, "long pass starts"))
        loop.sleep(90)

    loop.at(0, "provisioner", long_pass, lambda_call=True)
    loop.at(10, "provisioner", lambda: seen.append((loop.now, "queued at 10")), lambda_call=True)
    loop.at(50, "provisioner", lambda: seen.append((loop.now, "queued at 50")), lambda_call=True)
    # When the first runs 90 s
    loop.run_until(200)
    # Then the one queued at 50 s runs when the slot frees (40 s later); the one queued at 10 s waited
    # 80 s, past the event age, and is dropped
    assert seen == [(0, "long pass starts"), (90, "queued at 50")]
    assert loop.dropped == {"provisioner": 1}


def test_a_second_slot_lets_invocations_overlap() -> None:
    # Given a function reserved to two concurrent invocations (the watcher's overlap)
    loop, seen = _loop(watcher=Function(concurrency=2))

    def run(name: str) -> None:
        seen.append((loop.now, f"{name} starts"))
        loop.sleep(30)
        seen.append((loop.now, f"{name} ends"))

    loop.at(0, "watcher", lambda: run("first"), lambda_call=True)
    loop.at(10, "watcher", lambda: run("second"), lambda_call=True)
    loop.at(20, "watcher", lambda: run("third"), lambda_call=True)
    # When all three fall due
    loop.run_until(200)
    # Then the second starts during the first, the third waits for a free slot
    starts = {name: t for t, name in seen if name.endswith("starts")}
    assert starts["first starts"] == 0 and starts["second starts"] == 10 and starts["third starts"] >= 30


def test_a_schedule_keeps_ticking_after_a_dropped_tick() -> None:
    # Given a 10 s schedule on a function that is busy for 100 s once
    loop, seen = _loop(disruption=Function(concurrency=1, max_event_age=60))
    busy = [True]

    def tick() -> None:
        seen.append((loop.now, "tick"))
        if busy.pop() if busy else False:
            loop.sleep(100)

    loop.every(10, "disruption", tick, lambda_call=True)
    # When it runs for 3 minutes
    loop.run_until(180)
    # Then the ticks that waited more than 60 s were dropped, and the schedule went on after them
    assert loop.dropped["disruption"] >= 1
    assert seen[-1][0] >= 170 and seen[0] == (0, "tick")


def test_an_invocation_past_its_timeout_is_a_timeout() -> None:
    # Given a function with a 60 s timeout
    loop, _ = _loop(provisioner=Function(timeout=60))
    timed_out = []
    loop.on_timeout = timed_out.append
    loop.at(0, "provisioner", lambda: loop.sleep(61), lambda_call=True)
    loop.at(100, "provisioner", lambda: loop.sleep(59), lambda_call=True)
    # When one invocation runs 61 s of virtual time and another 59 s
    loop.run_until(300)
    # Then only the first is reported, as a timeout of that function
    assert [(i.function, i.started, i.timed_out) for i in timed_out] == [("provisioner", 0, True)]
    assert loop.timeouts() == {"provisioner": 1}


def test_a_run_on_the_demo_uses_its_deployed_schedules(moto_server: ThreadedMotoServer,
                                                       local_catalog: Catalog) -> None:
    # Given an idle cluster under the demo cluster file (reaction watcher, both schedules rate(10 minutes))
    scenario = _scenario(until="21m")
    # When it runs 21 virtual minutes
    record = run_scenario(scenario, moto_server=moto_server, catalog=local_catalog)
    facts = summary(record)
    # Then the provisioner's safety pass ran at 0, 10 and 20 minutes and disruption at 0:30, 10:30, 20:30
    assert facts["invocations"] == {"provisioner": 3, "disruption": 3}
    assert facts["provisioner_mode"] == "watcher"
    assert facts["schedules"] == {"provisioner": "rate(10 minutes)", "disruption": "rate(10 minutes)",
                                  "reaction": "watcher"}
    assert facts["lambda_timeouts"] == {} and facts["lambda_dropped"] == {}


def test_a_handler_running_past_its_timeout_is_reported(moto_server: ThreadedMotoServer, local_catalog: Catalog,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a disruption function with a 30 s timeout whose pass takes 45 s of virtual time (a stand-in
    # handler: the real ones stop at their deadline)
    from autoscaler.handlers.runtime import get_runtime
    from simulator.sim import runner

    def slow_pass(event: dict[str, Any], context: Any) -> dict[str, Any]:
        get_runtime().clock.sleep(45)
        return {"decisions": []}

    monkeypatch.setattr(runner, "disruption_handler", slow_pass)
    scenario = _scenario(until="140s", settings={"lambdaTimeoutSeconds": 30, "disruptionPeriodSeconds": 60})
    # When it runs (passes at 0:30 and 1:30, ending at 1:15 and 2:15: an invocation still running when the
    # run ends is not reported, so the run lasts past the second one's end)
    record = run_scenario(scenario, moto_server=moto_server, catalog=local_catalog)
    facts = summary(record)
    # Then each pass is a timeout of the disruption function, reported as a handler error and in the timeline
    assert facts["lambda_timeouts"] == {"disruption": 2}
    assert sum("over its 30 s timeout" in e for e in record.handler_errors) == 2
    assert any(src == "disruption" and "timed out" in text for _, src, text in record.timeline)
