"""Watcher reaction latency: from a pod going pending-unschedulable to the CreateFleet call for its node.

The real watcher service (``app/pod_watcher.py`` over ``KubeCluster``) watches the Kubernetes API
emulator; pods arrive at random times over ``--spread`` seconds, created as the kube-scheduler leaves them
(``PodScheduled=False``, reason ``Unschedulable``; 3 CPU, so each needs a new node). Each wake-up is
delivered to the real provisioner handler (``{"source": "watcher", ...}``: one pass, no watch) against moto,
one at a time as the provisioner's reserved concurrency of 1 does; wake-ups queued behind a running pass
wait for it. A botocore ``before-call.ec2.CreateFleet`` hook stamps the call and reads the pod keys from
its tags. Cases: an empty cluster, and 2,000 nodes with 25,000 pods (seeded by ``provisioner_pass.serve``
in a child process: 12 running pods per node, plus 1,000 more bound pods).

Reported per pod, measured here (wall): ``window`` (pending -> wake-up sent: the batching window, 1 s idle /
10 s max, plus watch delivery), ``queued`` (wake-up -> its pass starting) and ``total`` (pending ->
CreateFleet call start). The Lambda estimate, as in ``benchmarks/provisioner_pass.py``: the pass's work up
to CreateFleet is ``cpu / 0.58 + latency`` (a 1,024 MB Lambda's CPU share of this machine; 15 ms per
Kubernetes request, the AWS latencies of that benchmark injected as sleeps; CreateFleet's own 1.5 s comes
AFTER the call starts, so it is not counted), plus ``window`` and ``queued`` as measured, plus an assumed
``ASYNC_INVOKE_SECONDS`` from the watcher's Invoke call to the (warm) provisioner starting. Prints ONE JSON
object.

    python -m benchmarks.watcher_latency [--nodes 0,2000] [--pods 20] [--spread 20]
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing as mp
import os
import queue
import random
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "functions"), str(Path(__file__).resolve().parents[1])]

from benchmarks._offline import stdout_to_stderr  # noqa: E402
from benchmarks.provisioner_pass import (  # noqa: E402
    AWS_LATENCY,
    KUBE_LATENCY,
    LAMBDA_CPU_SHARE,
    _config_path,
    _install_latency,
    _Latency,
    serve,
)

# Lambda's async invoke: the Invoke call returns 202 in tens of ms; its internal queue hands the event to a
# warm function in roughly 50-200 ms. An assumption, not a measurement.
ASYNC_INVOKE_SECONDS = 0.2
EXTRA_BOUND_PODS = 1_000  # 2,000 nodes x 12 running pods + these = 25,000
TARGETS = {"medianSeconds": 2.0, "p99Seconds": 5.0}
UNSCHEDULABLE = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "message": "0/1 nodes are available: 1 Insufficient cpu."}


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))] if ordered else float("nan")


def _stats(values: list[float]) -> dict[str, float | None]:
    return {"median": round(statistics.median(values), 3) if values else None, "p99": round(_pct(values, 0.99), 3),
            "max": round(max(values), 3) if values else None}


def _post(url: str, obj: dict[str, Any]) -> None:
    request = urllib.request.Request(f"{url}/api/v1/namespaces/default/pods", data=json.dumps(obj).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=30) as answer:
        answer.read()


def _arriving_pod(i: int) -> dict[str, Any]:
    from simulator.local import inflate_pod  # noqa: PLC0415

    pod = inflate_pod(f"arrive-{i:04d}", app="arrive", cpu="3")
    pod["status"]["conditions"] = [UNSCHEDULABLE]
    return pod


class _QueuedWaker:
    """The ProvisionerWaker port as Lambda's async invoke: wake-ups are queued, a pass runs one at a time."""

    def __init__(self) -> None:
        self.wakes: queue.Queue[tuple[float, str, int] | None] = queue.Queue()

    def wake(self, *, reason: str, pods: int) -> None:
        self.wakes.put((time.perf_counter(), reason, pods))


def run_case(*, nodes: int, pods: int, spread: float, seed: int) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    server = ctx.Process(target=serve, args=(child, 0, nodes), daemon=True)
    server.start()
    info = parent.recv()
    try:
        return _measure(info, nodes=nodes, pods=pods, spread=spread, seed=seed)
    finally:
        parent.send("stop")
        server.join(timeout=60)


def _measure(info: dict[str, Any], *, nodes: int, pods: int, spread: float, seed: int) -> dict[str, Any]:
    logging.disable(logging.CRITICAL)
    warnings.simplefilter("ignore")
    os.environ.update({"AWS_ENDPOINT_URL": info["endpoint"], "AWS_ACCESS_KEY_ID": "testing",
                       "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
                       "POWERTOOLS_METRICS_NAMESPACE": "bench", "POWERTOOLS_SERVICE_NAME": "provisioner",
                       "POWERTOOLS_TRACE_DISABLED": "1"})
    import boto3  # noqa: PLC0415
    from botocore.config import Config  # noqa: PLC0415

    from autoscaler.adapters.aws import cloud  # noqa: PLC0415
    from autoscaler.adapters.clock import SystemClock  # noqa: PLC0415
    from autoscaler.adapters.kube.cluster import KubeCluster  # noqa: PLC0415
    from autoscaler.app.pod_watcher import PendingPodWatcher  # noqa: PLC0415
    from autoscaler.config import ENV_CLAIMS_TABLE  # noqa: PLC0415
    from autoscaler.domain.keys import PODS_TAG_PREFIX  # noqa: PLC0415
    from autoscaler.handlers import runtime as runtime_module  # noqa: PLC0415
    from autoscaler.handlers.provisioner import handler  # noqa: PLC0415
    from autoscaler.handlers.runtime import ENV_KUBE_ENDPOINT, build_runtime, set_runtime  # noqa: PLC0415
    from autoscaler.metrics_catalog import RecordingSink  # noqa: PLC0415
    from simulator.ec2_tokens import ClientTokens  # noqa: PLC0415
    from simulator.kube_api import client_for  # noqa: PLC0415
    from simulator.local import CLAIMS_TABLE, LambdaContext, demo_config, install_price_data, moto_catalog  # noqa: PLC0415

    configured = cloud.client_config
    patient = lambda **kw: configured(**kw).merge(Config(read_timeout=300))  # noqa: E731
    cloud.client_config = patient  # type: ignore[assignment]
    runtime_module.client_config = patient  # type: ignore[attr-defined]
    config = demo_config(_config_path())
    session = boto3.Session(region_name=config.region)
    install_price_data(session, region=config.region)
    ClientTokens().install(session.events)
    latency, aws_calls = _Latency(), Counter[str]()
    _install_latency(session, latency, aws_calls)
    fleet: dict[str, tuple[float, float, float]] = {}  # pod -> (wall, cpu, latency so far) at the call

    pass_start: list[tuple[float, float]] = [(0.0, 0.0)]

    def on_create_fleet(params: dict[str, Any], **_: Any) -> None:
        now, cpu = time.perf_counter(), time.process_time()
        waited = latency.within(pass_start[-1][0], now)
        body = params.get("body") or {}
        for key, value in body.items():
            if key.endswith(".Key") and str(value).startswith(PODS_TAG_PREFIX):
                for pod in str(body[key[:-4] + ".Value"]).split():
                    fleet.setdefault(pod, (now, cpu, waited))

    session.events.register("before-call.ec2.CreateFleet", on_create_fleet)
    rt = build_runtime(config=config, environ={ENV_KUBE_ENDPOINT: info["kube"], ENV_CLAIMS_TABLE: CLAIMS_TABLE},
                       session=session, clock=SystemClock(), sink=RecordingSink())
    rt.cloud.catalog.load(*moto_catalog(config.region))
    set_runtime(rt)
    if nodes:
        names = [f"ip-{i:05d}.ec2.internal" for i in range(nodes)]
        for i in range(EXTRA_BOUND_PODS):
            _post(info["kube"], {"metadata": {"name": f"extra-{i:05d}", "namespace": "default"},
                                 "spec": {"nodeName": names[i % nodes], "containers": [{"name": "app", "image": "pause",
                                          "resources": {"requests": {"cpu": "10m"}}}]},
                                 "status": {"phase": "Running"}})
    def context() -> LambdaContext:  # each invocation gets the function's whole 60 s timeout
        return LambdaContext(remaining_ms=60_000, function_name="provisioner")

    # A warm container: the scheduled pass has run (catalogue, prices, AMIs, subnets cached).
    handler({"source": "schedule", "kind": "provisioner", "watch": False}, context())

    waker = _QueuedWaker()
    watcher = PendingPodWatcher(pods=KubeCluster(client_for(info["kube"]), clock=SystemClock()), waker=waker,
                                clock=SystemClock())
    rng = random.Random(seed)
    offsets = sorted(rng.uniform(1.0, 1.0 + spread) for _ in range(pods))
    run_seconds = spread + 15.0
    created: dict[str, float] = {}

    def arrive() -> None:
        start = time.perf_counter()
        for i, at in enumerate(offsets):
            time.sleep(max(0.0, start + at - time.perf_counter()))
            created[f"default/arrive-{i:04d}"] = time.perf_counter()
            _post(info["kube"], _arriving_pod(i))

    mono = time.monotonic()
    watching = threading.Thread(target=lambda: watcher.run(until=mono + run_seconds), daemon=True)
    watching.start()
    time.sleep(0.5)  # the watcher's first list
    threading.Thread(target=arrive, daemon=True).start()
    passes: list[dict[str, Any]] = []
    # Until the watcher has stopped and every wake-up it sent has had its pass.
    while watching.is_alive() or not waker.wakes.empty():
        try:
            item = waker.wakes.get(timeout=0.2)
        except queue.Empty:
            continue
        if item is None:
            break
        woke, reason, count = item
        pass_start.append((time.perf_counter(), time.process_time()))
        answer = handler({"source": "watcher", "kind": "provisioner", "reason": reason, "pods": count}, context())
        passes.append({"woke": woke, "started": pass_start[-1][0], "cpu0": pass_start[-1][1],
                       "pods": count, "wall": round(time.perf_counter() - pass_start[-1][0], 3),
                       "launched": sum(len(p.get("launched") or ()) for p in answer.get("passes") or ())})
    return _report(nodes=nodes, pods=pods, spread=spread, created=created, fleet=fleet, passes=passes)


def _report(*, nodes: int, pods: int, spread: float, created: dict[str, float],
            fleet: dict[str, tuple[float, float, float]], passes: list[dict[str, Any]]) -> dict[str, Any]:
    total, window, queued, work_wall, estimate, work_cpu, work_latency = [], [], [], [], [], [], []
    for pod, at in created.items():
        if pod not in fleet:
            continue
        fleet_wall, fleet_cpu, waited = fleet[pod]
        # The pass that called CreateFleet for it: the last one started before the call.
        p = max((p for p in passes if p["started"] <= fleet_wall), key=lambda p: p["started"])
        woke = max(p["woke"], at)
        total.append(fleet_wall - at)
        window.append(woke - at)
        queued.append(p["started"] - woke)
        work_wall.append(fleet_wall - p["started"])
        work = (fleet_cpu - p["cpu0"]) / LAMBDA_CPU_SHARE + waited
        work_cpu.append(fleet_cpu - p["cpu0"])
        work_latency.append(waited)
        estimate.append((woke - at) + ASYNC_INVOKE_SECONDS + (p["started"] - woke) + work)
    est = _stats(estimate)
    return {
        "existingNodes": nodes, "clusterPods": nodes * 12 + (EXTRA_BOUND_PODS if nodes else 0),
        "arrivingPods": pods, "arrivalSpreadSeconds": spread,
        "podsWithCreateFleet": len(total), "passes": len(passes),
        "podsPerPass": [p["pods"] for p in passes], "passWallSeconds": [p["wall"] for p in passes],
        "measuredSeconds": {"total": _stats(total), "window": _stats(window), "queued": _stats(queued),
                            "passToCreateFleet": _stats(work_wall)},
        "lambdaEstimateSeconds": est,
        # The pass's part of the estimate: CPU seconds here (stretched by 1 / 0.58) and injected latency.
        "passToCreateFleetCpuSeconds": _stats(work_cpu), "passToCreateFleetLatencySeconds": _stats(work_latency),
        "meetsTargets": est["median"] is not None and est["median"] <= TARGETS["medianSeconds"]
        and est["p99"] <= TARGETS["p99Seconds"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="0,2000", help="existing nodes per case")
    parser.add_argument("--pods", type=int, default=20)
    parser.add_argument("--spread", type=float, default=20.0, help="seconds over which pods arrive")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--case", type=int, help="run one case (existing nodes) in this process")
    args = parser.parse_args(argv)
    if args.case is not None:
        with stdout_to_stderr():
            result = run_case(nodes=args.case, pods=args.pods, spread=args.spread, seed=args.seed)
        print(json.dumps(result))
        return 0
    cases = []
    for nodes in (int(n) for n in args.nodes.split(",")):
        done = subprocess.run([sys.executable, "-m", "benchmarks.watcher_latency", "--case", str(nodes),
                               "--pods", str(args.pods), "--spread", str(args.spread), "--seed", str(args.seed)],
                              capture_output=True, text=True, check=False, cwd=Path(__file__).resolve().parents[1])
        cases.append(json.loads(done.stdout) if done.returncode == 0 else
                     {"existingNodes": nodes, "error": done.stderr[-2000:]})
    print(json.dumps({"assumptions": {"lambdaCpuShare": LAMBDA_CPU_SHARE, "kubeLatencySeconds": KUBE_LATENCY,
                                      "awsLatencySeconds": AWS_LATENCY, "asyncInvokeSeconds": ASYNC_INVOKE_SECONDS,
                                      "estimate": "window + asyncInvoke + queued + (cpu / 0.58 + latency) of the "
                                                  "pass up to the CreateFleet call's start"},
                      "targets": TARGETS, "cases": cases}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
