"""Every shipped scenario (simulator/scenarios/*.yaml) meets its own assertions and replays its committed
record (tests/scenarios/records/, written by tests/scenarios/recording.py): run once, each part of the record
(timeline, samples, events, invocations, assertions, summary; the Cluster-Autoscaler baseline's too when an
assertion compares with it) has the recorded sha256. The record was written by another process, under
its own hash seed, so a run depending on the process (set or dict order, ids) fails here, as does any change
of behaviour that was not re-recorded. inflate.yaml's assertions have their own test (test_inflate.py, with
the registration race); the two large-steady scenarios (2 virtual hours of 500 nodes) replay their record at
a reduced size (every replica count, HPA bound and load divided by 20, their first 40 virtual minutes with
the scaling, load change and interruption steps of that span); at full size
benchmarks/simulation_determinism.py (make bench) compares two runs."""

from __future__ import annotations

import pytest
from moto.server import ThreadedMotoServer

from simulator.local import Catalog
from simulator.sim.scenario import load_scenario
from tests.scenarios.conftest import SCENARIOS
from tests.scenarios.recording import LONG, SHIPPED, Run, load_record, mismatch_message

pytestmark = pytest.mark.e2e

OTHERS = [name for name in SHIPPED if name != "inflate" and name not in LONG]


@pytest.mark.parametrize("name", OTHERS)
def test_scenario_meets_its_assertions_and_replays_its_record(name: str, moto_server: ThreadedMotoServer,
                                                              local_catalog: Catalog) -> None:
    # Given a shipped scenario, when it runs in virtual time through the real handlers (and, for an assertion
    # comparing with the Cluster-Autoscaler baseline, the baseline too, as `autoscaler simulate` does)
    run = Run(name, moto_server, local_catalog)
    # Then each of its assertions holds, and no handler invocation failed
    assert [r for r in run.results if not r["ok"]] == []
    assert run.record.handler_errors == []
    # And the run tells the recorded story, byte for byte (the baseline's too)
    actual, expected = run.as_record(), load_record(name)
    assert actual == expected, mismatch_message(name, expected, actual)


@pytest.mark.parametrize("name", LONG)
def test_scenario_replays_its_record(name: str, moto_server: ThreadedMotoServer, local_catalog: Catalog) -> None:
    # Given a long scenario, shrunk (the test above does not run it), when it runs its first 40 virtual minutes
    # Then it tells the recorded story byte for byte
    actual, expected = Run(name, moto_server, local_catalog).as_record(), load_record(name)
    assert actual == expected, mismatch_message(name, expected, actual)


def test_a_second_run_in_one_process_tells_the_same_story(moto_server: ThreadedMotoServer,
                                                          local_catalog: Catalog) -> None:
    # Given inflate (whose assertions test_inflate.py checks) run once in this process, telling its recorded
    # story
    expected = load_record("inflate")
    first = Run("inflate", moto_server, local_catalog).as_record()
    assert first == expected, mismatch_message("inflate", expected, first)
    # When it runs again in the same process (whatever the product and the simulator keep warm: module
    # caches, the handlers' warm state, moto's backends, the shared service models), then nothing the first
    # run left behind changes its story
    second = Run("inflate", moto_server, local_catalog).as_record()
    assert second == expected, mismatch_message("inflate", expected, second)


@pytest.mark.parametrize("name", sorted(LONG))
def test_long_scenario_is_valid(name: str) -> None:
    # Given a scenario only the benchmark runs, when it is loaded, then it validates and reaches its cluster file
    scenario = load_scenario(SCENARIOS / f"{name}.yaml")
    assert scenario.until >= 3600 and scenario.cluster_config().node_pools
