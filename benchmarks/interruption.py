"""Benchmark: the interruption handler's event-to-cordon latency and the time to drain a 110-pod node.

Runs the real ``handler(event, context)`` (warm runtime) against the Kubernetes API emulator over HTTP
and in-process moto EC2, in one process: the emulator's server threads share the interpreter with the
handler, so the figures are pessimistic for a Lambda talking to a real API server.

- Event-to-cordon: ``--batches`` SQS batches of 10 spot interruption warnings, each for its own node;
  each event's time is set to the moment the batch is handed to the handler, so the handler's
  EventToCordonSeconds metric is message-in to node-cordoned (the 10th message of a batch included).
- Drain: one spot warning for a node holding 110 pods (10 deployments of 10 pods, each with a PDB of
  maxUnavailable 1 that keeps allowing, plus 10 system-cluster-critical pods evicted in the second wave);
  pods disappear on eviction (no kubelet grace period), so this is the autoscaler's own overhead.

    python -m benchmarks.interruption [--batches 5]

Prints one JSON object. Targets: cordon within 1 s of the message; 110 pods drained well inside the
two-minute spot window.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if __package__ in (None, ""):  # `make bench` runs this file as a script
    sys.path[:0] = [str(ROOT), str(ROOT / "functions")]
# Before Powertools is imported (its Logger reads the level once): stdout carries only the result.
os.environ["POWERTOOLS_LOG_LEVEL"] = "WARNING"
os.environ["POWERTOOLS_TRACE_DISABLED"] = "true"

from moto import mock_aws  # noqa: E402

from benchmarks._offline import offline_aws_env  # noqa: E402
from simulator.kube_api import KubeApiServer  # noqa: E402
from tests import kube_objects as ko  # noqa: E402
from tests.handlers.interruption_world import World, event_for  # noqa: E402


def _now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _cordon_latency(world: World, batches: int) -> dict[str, Any]:
    instance_ids = []
    for b in range(batches):
        for i in range(10):
            name = f"cordon-{b}-{i}"
            instance_ids.append(world.add_node(name, owned=False))
            world.add_pod(f"app-{b}-{i}", name)
    per_batch_last = []
    for b in range(batches):
        before = len([p for p in world.sink.points if p[0] == "EventToCordonSeconds"])
        when = _now_iso()
        bodies = [{**event_for("spot-interruption-warning", iid), "time": when}
                  for iid in instance_ids[b * 10:(b + 1) * 10]]
        response = world.run(*bodies)
        assert response == {"batchItemFailures": []}, response
        figures = [p[1] for p in world.sink.points if p[0] == "EventToCordonSeconds"][before:]
        per_batch_last.append(max(figures))
    latencies = [p[1] for p in world.sink.points if p[0] == "EventToCordonSeconds"]
    return {"messages": len(latencies), "medianSeconds": round(statistics.median(latencies), 4),
            "p99Seconds": round(_p(latencies, 0.99), 4), "maxSeconds": round(max(latencies), 4),
            "slowestInBatchMedianSeconds": round(statistics.median(per_batch_last), 4),
            "targetSeconds": 1.0, "withinTarget": max(latencies) <= 1.0}


def _drain_110(world: World) -> dict[str, Any]:
    iid = world.add_node("big", owned=True)
    for d in range(10):
        world.kube.store.create("poddisruptionbudgets", ko.pdb(f"app-{d}", match={"app": f"app-{d}"},
                                                               max_unavailable=1), namespace="default")
        for r in range(10):
            world.add_pod(f"app-{d}-{r}", "big", labels={"app": f"app-{d}"})
    for c in range(10):
        world.add_pod(f"critical-{c}", "big", namespace="kube-system", priority_class="system-cluster-critical")
    world.add_pod("agent", "big", namespace="kube-system", owner_kind="DaemonSet")
    body = {**event_for("spot-interruption-warning", iid), "time": _now_iso()}
    start = time.perf_counter()
    response = world.run(body)
    wall = time.perf_counter() - start
    assert response == {"batchItemFailures": []}, response
    drained = [p[1] for p in world.sink.points if p[0] == "DrainSeconds"]
    evicted = world.evictions()
    return {"pods": 110, "evicted": len([e for e in evicted if e.startswith(("default/app-", "kube-system/crit"))]),
            "criticalAfterWorkloads": evicted.index("kube-system/critical-0") > evicted.index("default/app-9-9"),
            "drainSeconds": round(drained[-1], 3), "handlerSeconds": round(wall, 3),
            "instanceState": world.state(iid), "targetSeconds": 120.0}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=5)
    args = parser.parse_args(argv)
    offline_aws_env()
    with mock_aws(), KubeApiServer() as kube:
        world = World.create(kube)
        world.run(event_for("state-change-running", "i-0000000000000000a"))  # warm-up: the first invocation
        cordon = _cordon_latency(world, args.batches)
        drain = _drain_110(world)
    print(json.dumps({"benchmark": "interruption", "eventToCordon": cordon, "drain110Pods": drain}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
