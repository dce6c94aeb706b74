"""Benchmark: 10 spot interruption warnings in one SQS batch, pods needing 25 s to stop.

Runs the real ``handler(event, context)`` against the Kubernetes API emulator (graceful pod deletion) and
in-process moto EC2. A kubelet stand-in removes each evicted pod 25 s after its eviction (its
terminationGracePeriodSeconds spent shutting down). Measured from the moment the batch is handed to the
handler: when each node's first eviction was accepted, and when each node's drain finished (its Node
deleted after the last pod was gone). Wall-clock: the run takes about 30 s.

    python -m benchmarks.interruption_parallel [--stop-seconds 25]

Prints one JSON object. Target: all 10 nodes evicting within 1 s of receipt, all drained before 120 s
(the spot notice), no message returned for retry.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if __package__ in (None, ""):
    sys.path[:0] = [str(ROOT), str(ROOT / "functions")]
os.environ["POWERTOOLS_LOG_LEVEL"] = "WARNING"
os.environ["POWERTOOLS_TRACE_DISABLED"] = "true"

from moto import mock_aws  # noqa: E402

from benchmarks._offline import offline_aws_env  # noqa: E402
from simulator.kube_api import KubeApiServer  # noqa: E402
from tests.handlers.interruption_world import World, event_for  # noqa: E402


class _Kubelet:
    """Removes a terminating pod ``stop_seconds`` after its eviction; records eviction and removal times."""

    def __init__(self, world: World, stop_seconds: float, t0: float) -> None:
        self.world, self.stop, self.t0 = world, stop_seconds, t0
        self.evicted_at: dict[str, float] = {}
        self.gone_at: dict[str, float] = {}
        self.nodes: dict[str, str] = {}
        self.done = threading.Event()

    def run(self) -> None:
        store = self.world.kube.store
        while not self.done.is_set():
            now = time.perf_counter() - self.t0
            for p in store.objects("pods"):
                meta = p["metadata"]
                if meta.get("deletionTimestamp") and meta["name"] not in self.evicted_at:
                    self.evicted_at[meta["name"]] = now
                    self.nodes[meta["name"]] = p["spec"]["nodeName"]
            for name, at in list(self.evicted_at.items()):
                if name not in self.gone_at and now - at >= self.stop:
                    store.delete("pods", "default", name, grace_period_seconds=0)
                    self.gone_at[name] = now
            time.sleep(0.05)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stop-seconds", type=float, default=25.0)
    args = parser.parse_args(argv)
    offline_aws_env()
    with mock_aws(), KubeApiServer() as kube:
        world = World.create(kube)
        world.run(event_for("state-change-running", "i-0000000000000000a"))  # warm-up
        kube.store.graceful_deletion = True
        ids = []
        for i in range(10):
            ids.append(world.add_node(f"spot-{i}", owned=True))
            world.add_pod(f"app-{i}", f"spot-{i}", grace=int(args.stop_seconds) + 5)
        when = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        bodies = [{**event_for("spot-interruption-warning", iid), "time": when} for iid in ids]
        t0 = time.perf_counter()
        kubelet = _Kubelet(world, args.stop_seconds, t0)
        thread = threading.Thread(target=kubelet.run, daemon=True)
        thread.start()
        response: dict[str, Any] = world.run(*bodies, remaining_ms=(120 + 10) * 1000)
        handler_seconds = time.perf_counter() - t0
        kubelet.done.set()
        thread.join()
        evicting = sorted(kubelet.evicted_at.values())
        drained = sorted(kubelet.gone_at.values())
        terminated = sum(1 for iid in ids if world.state(iid) in ("shutting-down", "terminated"))
        nodes_left = sum(1 for i in range(10) if world.node(f"spot-{i}") is not None)
    print(json.dumps({
        "benchmark": "interruption_parallel", "nodes": 10, "podStopSeconds": args.stop_seconds,
        "retried": len(response.get("batchItemFailures") or ()),
        "firstEvictionSeconds": {"median": round(statistics.median(evicting), 3), "max": round(max(evicting), 3)},
        "lastPodGoneSeconds": round(max(drained), 3) if len(drained) == 10 else None,
        "handlerSeconds": round(handler_seconds, 3), "instancesTerminated": terminated, "nodesLeft": nodes_left,
        "targets": {"allEvictingWithinSeconds": 1.0, "allDrainedWithinSeconds": 120.0},
        "withinTargets": max(evicting) <= 1.0 and len(drained) == 10 and max(drained) < 120.0,
    }))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
