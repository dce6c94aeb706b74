"""Mutated events through the real interruption handler (issue 18 item 4 and the fuzz criterion): every
message is acknowledged or returned for retry, and either way a log line names its message id. The
10,000-event run is ``benchmarks/interruption_fuzz.py``; this is its in-suite slice."""

from __future__ import annotations

import json
import logging

import pytest

from tests.events.mutate import mutated_events
from tests.handlers.interruption_world import World, event_for


def _logged_ids(records: list[logging.LogRecord]) -> set[str]:
    return {str(r.message_id) for r in records if getattr(r, "message_id", None)}


def test_forty_mutated_events_lose_nothing_and_each_is_acknowledged_and_logged(
        world: World, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    iid = world.add_node("n1", owned=False)
    health = event_for("health-scheduled-change", iid)
    health["detail"]["affectedEntities"] = {"entityValue": iid}  # TypeError in the parser before the fix
    bodies = ["[" * 100_000 + "]" * 100_000, json.dumps(health), *mutated_events(38, seed=7)]
    ids = [f"m{i}" for i in range(len(bodies))]
    retried: set[str] = set()
    for start in range(0, len(bodies), 10):
        response = world.run(*bodies[start:start + 10], message_ids=ids[start:start + 10])
        retried |= {f["itemIdentifier"] for f in response["batchItemFailures"]}
    # a good message after the storm is still handled
    assert world.run(event_for("spot-interruption-warning", iid), message_ids=["good"]) == {"batchItemFailures": []}
    logged = _logged_ids(caplog.records)
    assert set(ids) <= logged, sorted(set(ids) - logged)
    assert retried == set()  # unreadable messages are acknowledged, never retried into the DLQ
    outcomes = world.sink.total("InterruptionOutcomes")
    assert outcomes == len(bodies) + 1  # each message counted exactly once: none dropped unseen
