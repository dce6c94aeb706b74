"""Concurrent interruption invocations (issue 16): many spot nodes reclaimed at once are drained by several
invocations of the interruption function side by side, as Lambda's SQS event source runs them, and the
cooperative scheduler gives the same timeline on every run."""

from __future__ import annotations

import pytest
from moto.server import ThreadedMotoServer

from simulator.local import Catalog
from simulator.sim.report import check, summary
from simulator.sim.runner import Record, run_scenario
from simulator.sim.scenario import load_scenario
from tests.scenarios.conftest import SCENARIOS
from tests.scenarios.recording import Run, load_record, mismatch_message

pytestmark = pytest.mark.e2e

NAME = "spot-interruption-burst"


def _run(moto_server: ThreadedMotoServer, catalog: Catalog) -> Record:
    # moto's instance ids, which FIS's choice and the timeline's text depend on, come from the scenario's seed
    return run_scenario(load_scenario(SCENARIOS / f"{NAME}.yaml"), moto_server=moto_server, catalog=catalog)


def test_batches_of_a_burst_of_interruptions_are_drained_side_by_side(moto_server: ThreadedMotoServer,
                                                                      local_catalog: Catalog) -> None:
    # Given six spot nodes interrupted at once, the event source's batches holding two messages each
    # When the scenario runs
    record = _run(moto_server, local_catalog)
    # Then three invocations of the interruption function handled them, all started when the messages
    # became visible and overlapping in virtual time (none waited for another to finish)
    runs = [i for i in record.lambda_invocations if i.function == "interruption"]
    assert len(runs) == 3
    assert {i.started for i in runs} == {181.0}
    assert all(i.ended > i.started for i in runs)
    assert max(i.started for i in runs) < min(i.ended for i in runs)
    # And each answered for its own batch: all six messages handled, none retried or dead-lettered
    assert record.interruption_messages == {"handled": 6, "deadLettered": 0, "pending": 0}
    assert summary(record)["max_concurrent_invocations"]["interruption"] == 3
    assert [r for r in check(record, record.scenario.assertions) if not r["ok"]] == []


def test_a_concurrent_run_gives_the_same_timeline_every_time(moto_server: ThreadedMotoServer,
                                                             local_catalog: Catalog) -> None:
    # Given the burst scenario (concurrent batches, drains polling, provisioner passes in between)
    # When it runs, then its timeline, invocations, samples and summary are those recorded by another process
    # under another hash seed (tests/scenarios/records/spot-interruption-burst.json), event for event
    actual, expected = Run(NAME, moto_server, local_catalog).as_record(), load_record(NAME)
    assert actual == expected, mismatch_message(NAME, expected, actual)
