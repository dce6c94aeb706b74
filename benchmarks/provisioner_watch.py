"""Watch-mode latency: from a pod becoming pending to the CreateFleet call that launches its node.

One watch-mode invocation of the real provisioner handler against moto (as a server) and the
Kubernetes API emulator (``simulator.local``). Pods of 3 CPU are created at uniformly random times while
the watch is open; a pass may put several of them on one larger node, and a pod that fits spare room on a
node launched earlier in the run gets no CreateFleet of its own (``podsOnEarlierLaunches``). A botocore
``before-call.ec2.CreateFleet`` hook stamps each call and reads the pod keys from the request's tags.

Reported per pod: ``total`` (pending -> CreateFleet), ``window`` (pending -> the pass starting, i.e. the
batching window: 1 s idle, 10 s max) and ``excludingWindow`` (the pass's own work up to CreateFleet:
listing pods/nodes/instances, planning, launch template, the call). Prints ONE JSON object.

    python benchmarks/provisioner_watch.py [--pods 50] [--spread 30] [--seed 7]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import statistics
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "functions"), str(Path(__file__).resolve().parents[1])]

from autoscaler.domain.keys import PODS_TAG_PREFIX  # noqa: E402
from benchmarks._offline import stdout_to_stderr  # noqa: E402
from simulator.local import LocalCluster  # noqa: E402


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def run(*, pods: int = 50, spread: float = 30.0, seed: int = 7) -> dict[str, Any]:
    rng = random.Random(seed)
    offsets = sorted(rng.uniform(1.0, 1.0 + spread) for _ in range(pods))
    watch = spread + 6.0
    fleet_at: dict[str, float] = {}
    created_at: dict[str, float] = {}

    def on_create_fleet(params: dict[str, Any], **_: Any) -> None:
        now = time.monotonic()
        body = params.get("body") or {}
        for key, value in body.items():
            if key.endswith(".Key") and str(value).startswith(PODS_TAG_PREFIX):
                for pod in str(body[key[:-4] + ".Value"]).split():
                    fleet_at.setdefault(pod, now)

    with LocalCluster.start() as env:
        env.session.events.register("before-call.ec2.CreateFleet", on_create_fleet)
        env.runtime()
        # Warm the container as a scheduled run would have: catalog, prices, AMIs, subnets.
        env.invoke_provisioner()

        def arrive() -> None:
            start = time.monotonic()
            for i, at in enumerate(offsets):
                time.sleep(max(0.0, start + at - time.monotonic()))
                env.kube.store.create("pods", _pod(i))
                created_at[f"default/big-{i:05d}"] = time.monotonic()

        feeder = threading.Thread(target=arrive, daemon=True)
        feeder.start()
        answer = env.invoke_provisioner(watch=True, remaining_ms=int((watch + 20.0) * 1000))
        feeder.join()
        passes = answer["passes"]
        starts = sorted(p["startedAt"] for p in passes)

    total, window, work = [], [], []
    for pod, created in created_at.items():
        launched = fleet_at.get(pod)
        if launched is None:
            continue
        started = max((s for s in starts if s <= launched), default=created)
        total.append(launched - created)
        window.append(max(0.0, started - created))
        work.append(launched - max(started, created))
    return {
        "benchmark": "provisioner_watch",
        "pods": pods, "arrivalSpreadSeconds": spread, "seed": seed,
        "batching": {"idleSeconds": 1.0, "maxSeconds": 10.0},
        "podsLaunched": len(total), "passes": len(passes),
        # Pods that fit spare room on a node launched earlier in the run get no CreateFleet of their own.
        "podsOnEarlierLaunches": len(created_at) - len(total),
        "unschedulable": sum(len(p["unschedulable"]) for p in passes),
        "createFleetCalls": len(set(fleet_at.values())),
        "totalSeconds": {"median": round(statistics.median(total), 3) if total else None,
                         "p99": round(_pct(total, 0.99), 3)},
        "windowSeconds": {"median": round(statistics.median(window), 3) if window else None,
                          "p99": round(_pct(window, 0.99), 3)},
        "excludingWindowSeconds": {"median": round(statistics.median(work), 3) if work else None,
                                   "p99": round(_pct(work, 0.99), 3)},
        "targetMedianExcludingWindowSeconds": 2.0,
    }


def _pod(i: int) -> dict[str, Any]:
    """A 3-CPU Deployment pod as kube-apiserver returns it (``benchmarks/_realistic.py``)."""
    from benchmarks._realistic import realistic_pod  # noqa: PLC0415

    pod = realistic_pod(i, random.Random(i), name=f"big-{i:05d}", labels={"app": "big"},
                        resources={"requests": {"cpu": "3"}}, controller="Deployment")
    pod["status"] = {"phase": "Pending"}  # created now: kube-scheduler has not looked at it yet
    return pod


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pods", type=int, default=50)
    parser.add_argument("--spread", type=float, default=30.0, help="seconds over which pods arrive")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "1")
    warnings.filterwarnings("ignore")
    logging.basicConfig(level=logging.ERROR)
    # The handler's log lines and EMF metrics go to stdout, as on Lambda: here stdout is the JSON only.
    with stdout_to_stderr():
        result = run(pods=args.pods, spread=args.spread, seed=args.seed)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
