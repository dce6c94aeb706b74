"""How long ``autoscaler plan`` takes to load a large snapshot from YAML and from the same data as JSON.

Builds a ~20 MB snapshot from examples/inflate-spot.yaml (its catalogue and NodePools, pods repeated
with unique names), writes it as block-style YAML and as JSON, and times ``load_snapshot`` (read, parse,
validate every object) on each, the median of ``--repeat`` loads taken in turn (JSON, YAML, JSON, ...) so
a change in the machine's load touches both alike: once in this process, and once each load in a new
process, as ``autoscaler plan`` reads a snapshot (``*_fresh_*``: a process that holds nothing else, where
this one holds the built snapshot and the previous loads' freed memory; interpreter start and imports are
not counted). Wall time is what a user waits; CPU time is the same in one process, and the load average
says whether the machine was busy. PyYAML's pure-Python loader is also timed on a 1 MB slice, to show what
the C loader saves.
Prints one JSON object.

Run: ``PYTHONPATH=functions:. python -m benchmarks.snapshot_load [--mb 20]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from autoscaler.adapters.snapshot_file import load_snapshot

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "inflate-spot.yaml"


def build(target_bytes: int) -> dict[str, Any]:
    base: dict[str, Any] = json.loads(json.dumps(yaml.load(EXAMPLE.read_text(), Loader=yaml.CSafeLoader)))
    template = base["pods"][0]
    one = len(yaml.safe_dump(template))
    count = max(1, target_bytes // one)
    pods = []
    for i in range(count):
        pod = json.loads(json.dumps(template))
        pod["metadata"]["name"] = f"bench-{i:07d}"
        pod["metadata"]["uid"] = f"uid-{i:07d}"
        pods.append(pod)
    base["pods"] = pods
    return base


def _cpu() -> float:
    """CPU seconds of this process."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def _time(paths: list[Path], repeat: int) -> list[tuple[float, float]]:
    """The median wall and CPU seconds of ``repeat`` loads of each path, the paths loaded in turn."""
    runs: list[list[tuple[float, float]]] = [[] for _ in paths]
    for _ in range(repeat):
        for i, path in enumerate(paths):
            cpu, started = _cpu(), time.perf_counter()
            load_snapshot(path)
            runs[i].append((time.perf_counter() - started, _cpu() - cpu))
    return [(statistics.median(w for w, _ in r), statistics.median(c for _, c in r)) for r in runs]


def _load_once(path: Path) -> tuple[float, float]:
    cpu, started = _cpu(), time.perf_counter()
    load_snapshot(path)
    return time.perf_counter() - started, _cpu() - cpu


def _time_fresh(paths: list[Path], repeat: int) -> list[tuple[float, float]]:
    """As ``_time``, each load in a new Python process (this module run with ``--load-one``)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    runs: list[list[tuple[float, float]]] = [[] for _ in paths]
    for _ in range(repeat):
        for i, path in enumerate(paths):
            out = subprocess.run([sys.executable, "-m", "benchmarks.snapshot_load", "--load-one", str(path)],
                                 env=env, capture_output=True, text=True, check=True).stdout
            wall, cpu = json.loads(out)
            runs[i].append((wall, cpu))
    return [(statistics.median(w for w, _ in r), statistics.median(c for _, c in r)) for r in runs]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=float, default=20.0)
    parser.add_argument("--repeat", type=int, default=3, help="loads per format; the median is reported")
    parser.add_argument("--load-one", type=Path, help=argparse.SUPPRESS)  # the new process of _time_fresh
    args = parser.parse_args()
    if args.load_one is not None:
        print(json.dumps(_load_once(args.load_one)))
        return
    data = build(int(args.mb * 1e6))
    with tempfile.TemporaryDirectory() as tmp:
        yaml_path, json_path = Path(tmp) / "snap.yaml", Path(tmp) / "snap.json"
        dumper: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
        yaml_path.write_text(yaml.dump(data, Dumper=dumper, default_flow_style=False, sort_keys=False))
        json_path.write_text(json.dumps(data))
        load_before = os.getloadavg()[0]
        (json_seconds, json_cpu), (yaml_seconds, yaml_cpu) = _time([json_path, yaml_path], args.repeat)
        (json_fresh, json_fresh_cpu), (yaml_fresh, yaml_fresh_cpu) = _time_fresh([json_path, yaml_path],
                                                                                 args.repeat)
        load_after = os.getloadavg()[0]
        sample = yaml_path.read_text()[:1_000_000]
        sample = sample[:sample.rfind("\n- ")]  # a whole number of list items
        started = time.perf_counter()
        yaml.load(sample, Loader=yaml.SafeLoader)
        pure_per_mb = (time.perf_counter() - started) / (len(sample) / 1e6)
        print(json.dumps({
            "benchmark": "snapshot_load",
            "pods": len(data["pods"]),
            "repeat": args.repeat,
            "yaml_mb": round(yaml_path.stat().st_size / 1e6, 1),
            "json_mb": round(json_path.stat().st_size / 1e6, 1),
            "libyaml": bool(yaml.__with_libyaml__),
            "yaml_load_seconds": round(yaml_seconds, 2),
            "json_load_seconds": round(json_seconds, 2),
            "yaml_over_json": round(yaml_seconds / json_seconds, 2),
            "yaml_cpu_seconds": round(yaml_cpu, 2),
            "json_cpu_seconds": round(json_cpu, 2),
            "yaml_fresh_seconds": round(yaml_fresh, 2),
            "json_fresh_seconds": round(json_fresh, 2),
            "yaml_over_json_fresh": round(yaml_fresh / json_fresh, 2),
            "yaml_fresh_cpu_seconds": round(yaml_fresh_cpu, 2),
            "json_fresh_cpu_seconds": round(json_fresh_cpu, 2),
            "load_average": [round(load_before, 1), round(load_after, 1)],
            "pure_python_yaml_seconds_per_mb": round(pure_per_mb, 2),
        }))


if __name__ == "__main__":
    main()
