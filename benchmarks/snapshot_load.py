"""How long ``autoscaler plan`` takes to load a large snapshot from YAML and from the same data as JSON.

Builds a ~20 MB snapshot from examples/inflate-spot.yaml (its catalogue and NodePools, pods repeated
with unique names), writes it as block-style YAML and as JSON, and times ``load_snapshot`` (read, parse,
validate every object) on each, the median of ``--repeat`` loads; the YAML also without rapidyaml
(libyaml's event stream, the fallback). Also times PyYAML's pure-Python loader on a 1 MB slice, to show
what the C loaders save. Prints one JSON object.

Run: ``PYTHONPATH=functions:. python -m benchmarks.snapshot_load [--mb 20]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from autoscaler import rapid_yaml
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


def _time(path: Path, repeat: int) -> float:
    """The median of ``repeat`` loads: the machine is shared, so one run can be an outlier."""
    runs = []
    for _ in range(repeat):
        started = time.perf_counter()
        load_snapshot(path)
        runs.append(time.perf_counter() - started)
    return statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=float, default=20.0)
    parser.add_argument("--repeat", type=int, default=3, help="loads per format; the median is reported")
    args = parser.parse_args()
    data = build(int(args.mb * 1e6))
    with tempfile.TemporaryDirectory() as tmp:
        yaml_path, json_path = Path(tmp) / "snap.yaml", Path(tmp) / "snap.json"
        dumper: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
        yaml_path.write_text(yaml.dump(data, Dumper=dumper, default_flow_style=False, sort_keys=False))
        json_path.write_text(json.dumps(data))
        yaml_seconds, json_seconds = _time(yaml_path, args.repeat), _time(json_path, args.repeat)
        rapid, rapid_yaml.ryml = rapid_yaml.ryml, None  # the libyaml event path, as without rapidyaml
        try:
            events_seconds = _time(yaml_path, args.repeat)
        finally:
            rapid_yaml.ryml = rapid
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
            "rapidyaml": rapid is not None,
            "yaml_libyaml_events_seconds": round(events_seconds, 2),
            "pure_python_yaml_seconds_per_mb": round(pure_per_mb, 2),
        }))


if __name__ == "__main__":
    main()
