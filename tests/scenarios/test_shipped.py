"""Every shipped scenario (simulator/scenarios/*.yaml) meets its own assertions and is deterministic: run
twice, the whole record (timeline, samples, summary) is the same byte for byte. inflate.yaml has its own
test (test_inflate.py) with the registration race; the two large-steady scenarios (2 virtual hours of 500
nodes) are compared at a reduced size: every replica count, HPA bound and load divided by 20, over their first
40 virtual minutes (the scaling, load change and interruption steps of that span included); at full size
benchmarks/simulation_determinism.py (make bench) compares their two runs. A scenario asserting a ratio to the
Cluster-Autoscaler baseline runs the baseline too, and its two runs are compared as well."""

from __future__ import annotations

import pytest
from moto.server import ThreadedMotoServer

from simulator.local import Catalog
from simulator.sim.report import check, replay_json
from simulator.sim.runner import Record, run_scenario
from simulator.sim.scenario import Scenario, load_scenario
from tests.scenarios.conftest import SCENARIOS

pytestmark = pytest.mark.e2e

# Too long for `make test` at full size (2 virtual hours of 500 nodes, about a minute of CPU a run, mostly the
# handlers and moto): benchmarks/simulation.py measures them, benchmarks/simulation_determinism.py compares runs.
LONG = {"large-steady", "large-steady-as-deployed"}
OTHERS = sorted(p.stem for p in SCENARIOS.glob("*.yaml") if p.stem != "inflate" and p.stem not in LONG)


@pytest.mark.parametrize("name", OTHERS)
def test_scenario_meets_its_assertions(name: str, moto_server: ThreadedMotoServer, local_catalog: Catalog) -> None:
    # Given a shipped scenario, when it runs in virtual time through the real handlers
    scenario = load_scenario(SCENARIOS / f"{name}.yaml")
    record = run_scenario(scenario, moto_server=moto_server, catalog=local_catalog)
    # (an assertion comparing with the Cluster-Autoscaler baseline runs it too, as `autoscaler simulate` does)
    base = _baseline(scenario, moto_server, local_catalog)
    # Then each of its assertions holds, and no handler invocation failed
    results = check(record, scenario.assertions, base)
    assert [r for r in results if not r["ok"]] == []
    assert record.handler_errors == []
    # And a second run tells the same story, byte for byte (the baseline's too)
    again = run_scenario(scenario, moto_server=moto_server, catalog=local_catalog)
    base_again = _baseline(scenario, moto_server, local_catalog)
    assert replay_json(again, check(again, scenario.assertions, base_again)) == replay_json(record, results)
    if base is not None and base_again is not None:
        assert replay_json(base_again, []) == replay_json(base, [])


def _baseline(scenario: Scenario, moto_server: ThreadedMotoServer, catalog: Catalog) -> Record | None:
    if all(a.ratio_to_baseline is None for a in scenario.assertions):
        return None
    return run_scenario(scenario, moto_server=moto_server, catalog=catalog, policy="cluster-autoscaler")


SHRINK = 20


def _shrunk(scenario: Scenario) -> Scenario:
    """The scenario with every replica count, HPA bound and client load divided by ``SHRINK``."""
    initial = scenario.initial.model_copy(update={
        "deployments": [d.model_copy(update={"replicas": max(1, d.replicas // SHRINK)})
                        for d in scenario.initial.deployments],
        "hpas": [h.model_copy(update={"min_replicas": max(1, h.min_replicas // SHRINK),
                                      "max_replicas": max(1, h.max_replicas // SHRINK)})
                 for h in scenario.initial.hpas]})
    steps = []
    for step in scenario.timeline:
        update: dict[str, object] = {}
        if step.scale is not None:
            update["scale"] = step.scale.model_copy(update={"replicas": max(1, step.scale.replicas // SHRINK)})
        elif step.load is not None:
            update["load"] = step.load.model_copy(update={"cpu": step.load.cpu / SHRINK})
        elif step.interrupt is not None:
            update["interrupt"] = step.interrupt.model_copy(update={"count": 1})
        steps.append(step.model_copy(update=update))
    return scenario.model_copy(update={"initial": initial, "timeline": steps})


@pytest.mark.parametrize("name", ["inflate", *sorted(LONG)])
def test_scenario_is_deterministic(name: str, moto_server: ThreadedMotoServer, local_catalog: Catalog) -> None:
    # Given a scenario the test above does not run (inflate: test_inflate.py; the long ones shrunk, 40 minutes)
    scenario = load_scenario(SCENARIOS / f"{name}.yaml")
    until = None
    if name in LONG:
        scenario, until = _shrunk(scenario), 2400.0
    # When it runs twice, then the records are the same byte for byte
    first, second = (run_scenario(scenario, until=until, moto_server=moto_server, catalog=local_catalog)
                     for _ in range(2))
    assert replay_json(second, []) == replay_json(first, [])


@pytest.mark.parametrize("name", sorted(LONG))
def test_long_scenario_is_valid(name: str) -> None:
    # Given a scenario only the benchmark runs, when it is loaded, then it validates and reaches its cluster file
    scenario = load_scenario(SCENARIOS / f"{name}.yaml")
    assert scenario.until >= 3600 and scenario.cluster_config().node_pools
