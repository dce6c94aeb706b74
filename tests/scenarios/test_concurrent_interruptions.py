"""Concurrent interruption invocations (issue 16): many spot nodes reclaimed at once are drained by several
invocations of the interruption function side by side, as Lambda's SQS event source runs them, and the
cooperative scheduler gives the same timeline on every run."""

from __future__ import annotations

import re
from typing import Any

import pytest
from moto.moto_api._internal import mock_random
from moto.server import ThreadedMotoServer

from simulator.local import Catalog
from simulator.sim.report import check, summary
from simulator.sim.runner import Record, run_scenario
from simulator.sim.scenario import load_scenario
from tests.scenarios.conftest import SCENARIOS

pytestmark = pytest.mark.e2e

# Node-claim names carry 8 characters from `secrets` (the product's, as Karpenter's): not seedable.
_CLAIM = re.compile(r"\bdefault-[a-z0-9]{8}\b")


def _run(moto_server: ThreadedMotoServer, catalog: Catalog, **fields: Any) -> Record:
    scenario = load_scenario(SCENARIOS / "spot-interruption-burst.yaml")
    if fields:
        scenario = scenario.model_copy(update=fields)
    mock_random.seed(16)  # moto's instance ids, which FIS's choice and the timeline's text depend on
    return run_scenario(scenario, moto_server=moto_server, catalog=catalog)


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
    # When it runs twice from the same seed
    first, second = (_run(moto_server, local_catalog) for _ in range(2))

    # Then the timelines, the invocations and the summaries are the same, event for event
    def story(rec: Record) -> list[tuple[float, str, str]]:
        return [(t, src, _CLAIM.sub("<claim>", text)) for t, src, text in rec.timeline]

    assert story(first) == story(second)
    assert [(i.function, i.started, i.ended) for i in first.lambda_invocations] == \
        [(i.function, i.started, i.ended) for i in second.lambda_invocations]
    wall = {"wall_seconds", "handler_wall_seconds", "handler_wall_by_function"}
    assert {k: v for k, v in summary(first).items() if k not in wall} == \
        {k: v for k, v in summary(second).items() if k not in wall}
