"""Benchmark: 10,000 mutated interruption events through the real interruption handler.

Each body is one of the sample events (tests/events) mutated by ``tests.events.mutate``: fields removed,
values of the wrong type, odd times, truncated JSON, JSON nested 100,000 deep. They go through
``handler(event, context)`` in SQS batches of 10 against the Kubernetes API emulator and in-process moto
EC2, with one real node whose instance the mutated events sometimes still name.

Counts: crashes (the handler raised), lost (a message neither acknowledged nor returned, or counted in no
InterruptionOutcomes metric), retried without a log line naming its message id, and how many messages
were read, ignored or malformed.

    python -m benchmarks.interruption_fuzz [--events 10000] [--seed 18]

Prints one JSON object. Target: 0 crashes, 0 lost, 0 retried without a log line.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if __package__ in (None, ""):
    sys.path[:0] = [str(ROOT), str(ROOT / "functions")]
os.environ["POWERTOOLS_LOG_LEVEL"] = "INFO"
os.environ["POWERTOOLS_TRACE_DISABLED"] = "true"

from moto import mock_aws  # noqa: E402

from benchmarks._offline import offline_aws_env  # noqa: E402
from simulator.kube_api import KubeApiServer  # noqa: E402
from tests.events.mutate import mutated_events  # noqa: E402
from tests.handlers.interruption_world import World  # noqa: E402


class _Ids(logging.Handler):
    """Collects the message ids named in log records (Powertools puts ``extra`` on the record)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.ids: set[str] = set()

    def emit(self, record: logging.LogRecord) -> None:
        mid = getattr(record, "message_id", None)
        if mid:
            self.ids.add(str(mid))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=18)
    args = parser.parse_args(argv)
    offline_aws_env()
    ids_seen = _Ids()
    log = logging.getLogger("service_undefined")
    log.handlers = [ids_seen]  # stdout carries only the result
    log.propagate = False
    crashes = lost = retried = retried_unlogged = 0
    start = time.perf_counter()
    bodies = list(mutated_events(args.events, seed=args.seed))
    with mock_aws(), KubeApiServer() as kube:
        world = World.create(kube)
        world.add_node("n1", owned=False)
        for b in range(0, len(bodies), 10):
            chunk = bodies[b:b + 10]
            ids = [f"m{b + i}" for i in range(len(chunk))]
            before = world.sink.total("InterruptionOutcomes")
            try:
                response: dict[str, Any] = world.run(*chunk, message_ids=ids)
            except Exception:  # a crash: the whole batch would come back
                crashes += 1
                continue
            failed = {f["itemIdentifier"] for f in response.get("batchItemFailures") or ()}
            retried += len(failed)
            retried_unlogged += len(failed - ids_seen.ids)
            lost += len(set(ids) - ids_seen.ids - failed)
            lost += max(0, len(chunk) - int(world.sink.total("InterruptionOutcomes") - before))
        kinds = {o: int(world.sink.total("InterruptionOutcomes", Outcome=o))
                 for o in ("acted", "ignored", "notInCluster", "failed")}
        malformed = int(world.sink.total("InterruptionEvents", Kind="malformed"))
    print(json.dumps({"benchmark": "interruption_fuzz", "events": len(bodies), "seed": args.seed,
                      "crashes": crashes, "lost": lost, "retried": retried,
                      "retriedWithoutLogLine": retried_unlogged, "malformed": malformed, "outcomes": kinds,
                      "seconds": round(time.perf_counter() - start, 1)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
