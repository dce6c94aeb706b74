"""The watcher function at scale: 50,000 pending pods as kube-apiserver returns them, its list, its memory,
and that it still wakes the provisioner.

The Kubernetes API emulator runs in a child process, seeded with ``--pods`` pending pods from
``benchmarks/_realistic.py`` (Deployment, StatefulSet and Job pods, 4.5-9 KB each, each marked
``PodScheduled=False``/``Unschedulable`` by kube-scheduler). A fresh measuring process imports the watcher's
handler module as its Lambda container does (boto3, the Kubernetes client), builds the real
``PendingPodWatcher`` on ``KubeCluster`` (the production page size), with a waker that records the
wake-ups instead of invoking Lambda, and runs it for ``--seconds``: it lists the unbound pods page by page
(``lean.watched_pod_page``: only what the provisionable test reads), batches them and wakes the provisioner.
Reported: the process's peak RSS against the function's 128 MB, the CPU seconds of the run, the bytes
listed, the wake-ups and the pods they carried, and a Lambda estimate of the list
(``cpu / (128 / 1769) + 15 ms a page + bytes at 60 MB/s``, the assumptions of ``provisioner_pass.py``).
Prints ONE JSON object.

    python -m benchmarks.watcher_scale [--pods 50000] [--seconds 30]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "functions"), str(ROOT)]

from benchmarks._realistic import realistic_pod, size_summary  # noqa: E402

WATCHER_MEMORY_MB = 128  # infra/functions.py
LAMBDA_MB_PER_VCPU = 1769
KUBE_LATENCY = 0.015
KUBE_BYTES_PER_SECOND = 60e6


def _pods(count: int) -> list[dict[str, Any]]:
    """Pods kube-scheduler has just found no node for (a burst: the watcher wakes for recent ones only)."""
    rng = random.Random(11)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    pods = [realistic_pod(i, rng, name=f"web-{i:05d}", labels={"app": f"web-{i % 40}"},
                          resources={"requests": {"cpu": "250m", "memory": "256Mi"}}) for i in range(count)]
    for pod in pods:
        pod["status"]["conditions"][0]["lastTransitionTime"] = now
    return pods


def serve(pods: int) -> None:
    from simulator.kube_api import KubeApiServer  # noqa: PLC0415

    server = KubeApiServer()
    seeded = _pods(pods)
    sizes = size_summary(seeded[:2000])
    server.store.seed("pods", seeded)
    server.start()
    print(json.dumps({"url": server.url, "sizes": sizes}), flush=True)
    sys.stdin.read()  # serve until the parent closes our stdin
    server.stop()


class _Waker:
    def __init__(self) -> None:
        self.wakes: list[tuple[float, int, str]] = []

    def wake(self, *, reason: str, pods: int, resource_version: str = "") -> None:
        self.wakes.append((time.monotonic(), pods, reason))


def measure(url: str, seconds: float) -> dict[str, Any]:
    import autoscaler.handlers.watcher  # noqa: F401, PLC0415 - the Lambda container's imports
    from autoscaler.adapters.clock import SystemClock  # noqa: PLC0415
    from autoscaler.adapters.kube.cluster import KubeCluster  # noqa: PLC0415
    from autoscaler.adapters.kube.node_watch import KubeNodeWatch  # noqa: PLC0415
    from autoscaler.app.pod_watcher import PendingPodWatcher, WatcherSettings  # noqa: PLC0415
    from simulator.kube_api import client_for  # noqa: PLC0415

    received: list[int] = []
    send = KubeCluster._send

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        answer = send(self, *args, **kwargs)
        if not any(k == "watch" for k, _ in kwargs.get("query") or ()):
            received.append(len(answer.read() or b""))
        return answer

    KubeCluster._send = counted  # type: ignore[method-assign]
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    cluster = KubeCluster(client_for(url), clock=SystemClock())
    waker = _Waker()
    service = PendingPodWatcher(pods=cluster, nodes=KubeNodeWatch(cluster), waker=waker, clock=SystemClock(),
                                settings=WatcherSettings())
    start, c0 = time.monotonic(), time.process_time()
    run = service.run(until=start + seconds)
    cpu = time.process_time() - c0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    share = WATCHER_MEMORY_MB / LAMBDA_MB_PER_VCPU
    listed = sum(received)
    return {"peakMiB": round(peak, 1), "importedMiB": round(before, 1), "cpu": round(cpu, 3),
            "listRequests": len(received), "listedMiB": round(listed / 2**20, 1),
            "lists": run.lists, "wakes": run.wakes, "wokenPods": run.woken_pods, "errors": run.errors,
            "waitingPods": len(service.provisionable),
            "firstWakeAfterSeconds": round(waker.wakes[0][0] - start, 2) if waker.wakes else None,
            "estimateListSeconds": round(cpu / share + len(received) * KUBE_LATENCY
                                         + listed / KUBE_BYTES_PER_SECOND, 1),
            "lambdaCpuShare": round(share, 4)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=50_000)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.pods)
        return 0
    if args.measure:
        print(json.dumps(measure(args.measure, args.seconds)))
        return 0
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "functions"), str(ROOT)])}
    emulator = subprocess.Popen([sys.executable, "-m", "benchmarks.watcher_scale", "--serve", "--pods", str(args.pods)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    try:
        assert emulator.stdout is not None
        info = json.loads(emulator.stdout.readline())
        done = subprocess.run([sys.executable, "-m", "benchmarks.watcher_scale", "--measure", info["url"],
                               "--seconds", str(args.seconds)], check=True, capture_output=True, text=True, cwd=ROOT,
                              env=env)
        result = json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        if emulator.stdin:
            emulator.stdin.close()
        emulator.wait(timeout=60)
    print(json.dumps({
        "benchmark": "watcher_scale", "pendingPods": args.pods, "podSizes": info["sizes"], **result,
        "loadAverage": [round(x, 2) for x in os.getloadavg()],
        "assumptions": {"watcherMemoryMb": WATCHER_MEMORY_MB, "lambdaMbPerVcpu": LAMBDA_MB_PER_VCPU,
                        "kubeLatencySeconds": KUBE_LATENCY, "kubeBytesPerSecond": KUBE_BYTES_PER_SECOND,
                        "peak": "ru_maxrss of the measuring process (Python, the handler's imports, the run)",
                        "waker": "records wake-ups (no Lambda invoke)"},
        "targets": {"peakMiB": {"got": result["peakMiB"], "target": WATCHER_MEMORY_MB,
                                "met": result["peakMiB"] <= WATCHER_MEMORY_MB},
                    "wokeTheProvisioner": {"got": result["wakes"], "met": result["wakes"] >= 1
                                           and result["wokenPods"] == args.pods}},
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
