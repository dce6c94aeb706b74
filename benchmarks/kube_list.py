"""Benchmark: list 50,000 pods and 5,000 nodes from the Kubernetes API emulator.

Pods and nodes as kube-apiserver returns them (``benchmarks/_realistic.py``: managedFields, env vars,
probes, the kubelet's status and images). Compares the adapter (``KubeCluster``: pages decoded leanly,
``adapters/kube/lean.py``, and parsed into the domain models) with the official
client's generated-model path (``CoreV1Api().list_pod_for_all_namespaces()`` deserialised), both
paginated with the same page size. The emulator runs in its own process, seeded directly in its
store; each measurement runs in a fresh process so peak memory (``ru_maxrss``) is its own.

    python -m benchmarks.kube_list [--pods 50000] [--nodes 5000] [--runs 3]

Prints one JSON object. Target: the adapter at least 5x faster, under 512 MiB peak.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if __package__ in (None, ""):  # `make bench` runs this file as a script
    sys.path[:0] = [str(ROOT), str(ROOT / "functions")]

from kubernetes import client as k8s  # noqa: E402

from autoscaler.adapters.kube.cluster import KubeCluster  # noqa: E402
from benchmarks._realistic import realistic_node, realistic_pod  # noqa: E402
from simulator.kube_api import KubeApiServer, client_for  # noqa: E402

PAGE_SIZE = 500
_RNG = random.Random(3)


def _pod(i: int, nodes: int) -> dict[str, Any]:
    """A running pod as kube-apiserver returns it (``_realistic``: managedFields, env, probes, status)."""
    app = f"app-{i % 500}"
    pod = realistic_pod(i, _RNG, name=f"{app}-{i:06d}", namespace=f"ns-{i % 50}",
                        labels={"app": app, "team": f"t{i % 7}"},
                        resources={"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}},
                        node_name=f"ip-10-0-{(i % nodes) // 250}-{(i % nodes) % 250}.ec2.internal")
    pod["metadata"]["uid"] = f"00000000-0000-0000-0000-{i:012d}"
    return pod


def _node(i: int) -> dict[str, Any]:
    name = f"ip-10-0-{i // 250}-{i % 250}.ec2.internal"
    return realistic_node({
        "metadata": {"name": name, "uid": f"node-{i}", "creationTimestamp": "2024-05-01T11:00:00Z",
                     "labels": {"kubernetes.io/hostname": name, "kubernetes.io/arch": "amd64",
                                "kubernetes.io/os": "linux", "node.kubernetes.io/instance-type": "m5.2xlarge",
                                "topology.kubernetes.io/zone": f"us-east-1{'abc'[i % 3]}",
                                "karpenter.sh/nodepool": "default", "karpenter.sh/capacity-type": "spot"}},
        "spec": {"providerID": f"aws:///us-east-1a/i-{i:017x}"},
        "status": {"capacity": {"cpu": "8", "memory": "32386524Ki", "pods": "58", "ephemeral-storage": "83873772Ki"},
                   "allocatable": {"cpu": "7910m", "memory": "31369692Ki", "pods": "58",
                                   "ephemeral-storage": "76224326324"},
                   "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
                   "nodeInfo": {"architecture": "amd64", "bootID": f"boot-{i}", "containerRuntimeVersion":
                                "containerd://1.7.11", "kernelVersion": "6.1.72", "kubeProxyVersion": "v1.30.0",
                                "kubeletVersion": "v1.30.0-eks", "machineID": f"m{i}", "operatingSystem": "linux",
                                "osImage": "Amazon Linux 2023", "systemUUID": f"ec2-{i}"}},
    }, _RNG)


def serve(pods: int, nodes: int) -> None:
    server = KubeApiServer()
    server.store.seed("nodes", [_node(i) for i in range(nodes)])
    server.store.seed("pods", [_pod(i, nodes) for i in range(pods)])
    server.start()
    print(server.url, flush=True)
    sys.stdin.read()  # serve until the parent closes our stdin
    server.stop()


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(path: str, url: str) -> None:
    api = client_for(url)
    before = _rss_mib()
    start = time.perf_counter()
    if path == "adapter":
        cluster = KubeCluster(api, page_size=PAGE_SIZE)
        n_pods, n_nodes = len(cluster.pods()), len(cluster.nodes())
    else:
        core = k8s.CoreV1Api(api)
        items: list[Any] = []
        for lister in (core.list_pod_for_all_namespaces, core.list_node):
            token = None
            while True:
                page = lister(limit=PAGE_SIZE, _continue=token)
                items.extend(page.items)
                token = page.metadata._continue
                if not token:
                    break
        n_pods = sum(1 for i in items if isinstance(i, k8s.V1Pod))
        n_nodes = sum(1 for i in items if isinstance(i, k8s.V1Node))
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "peak_rss_mib": _rss_mib(), "rss_before_mib": before,
                      "pods": n_pods, "nodes": n_nodes}))


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "functions"), str(ROOT)])}


def _child(path: str, url: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "benchmarks.kube_list", "--measure", path, "--url", url],
                         check=True, capture_output=True, text=True, cwd=ROOT, env=_env())
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pods", type=int, default=50_000)
    parser.add_argument("--nodes", type=int, default=5_000)
    parser.add_argument("--runs", type=int, default=3, help="adapter runs (median reported)")
    parser.add_argument("--baseline-runs", type=int, default=1, help="generated-model runs")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--measure", choices=("adapter", "generated"), help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.pods, args.nodes)
        return 0
    if args.measure:
        measure(args.measure, args.url)
        return 0

    t0 = time.perf_counter()
    emulator = subprocess.Popen([sys.executable, "-m", "benchmarks.kube_list", "--serve", "--pods", str(args.pods),
                                 "--nodes", str(args.nodes)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                cwd=ROOT, env=_env())
    try:
        assert emulator.stdout is not None
        url = emulator.stdout.readline().strip()
        seed_seconds = time.perf_counter() - t0
        adapter = [_child("adapter", url) for _ in range(args.runs)]
        baseline = [_child("generated", url) for _ in range(args.baseline_runs)]
    finally:
        if emulator.stdin:
            emulator.stdin.close()
        emulator.wait(timeout=30)
    a_sec = statistics.median(r["seconds"] for r in adapter)
    b_sec = statistics.median(r["seconds"] for r in baseline)
    a_mem = max(r["peak_rss_mib"] for r in adapter)
    for r in adapter + baseline:
        if (r["pods"], r["nodes"]) != (args.pods, args.nodes):
            raise SystemExit(f"listed {r['pods']} pods / {r['nodes']} nodes, expected {args.pods} / {args.nodes}")
    print(json.dumps({
        "benchmark": "kube_list", "pods": args.pods, "nodes": args.nodes, "page_size": PAGE_SIZE,
        "emulator_seed_seconds": round(seed_seconds, 2),
        "adapter": {"median_seconds": round(a_sec, 3), "runs": [round(r["seconds"], 3) for r in adapter],
                    "peak_rss_mib": round(a_mem, 1)},
        "generated_models": {"median_seconds": round(b_sec, 3),
                             "peak_rss_mib": round(max(r["peak_rss_mib"] for r in baseline), 1)},
        "speedup": round(b_sec / a_sec, 2),
        "targets": {"speedup_at_least": 5, "peak_rss_mib_below": 512,
                    "met": b_sec / a_sec >= 5 and a_mem < 512},
    }))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
