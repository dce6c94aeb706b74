"""Determinism at full size: each scenario run twice, the whole record (timeline, samples, events, summary,
assertions) compared byte for byte. ``make test`` compares every shipped scenario's run with its committed
record (tests/scenarios/records/), the two large-steady ones at 1/20 of their size
(tests/scenarios/test_shipped.py): at full size they are 2 virtual hours of 500 nodes and 5,000 pods,
minutes of CPU each, so this benchmark (in ``make bench``) runs them twice.

Prints ONE JSON object: per scenario, whether the two runs are identical, the sha256 of the record, each
run's wall and process CPU seconds, launches and assertions failed. Exit status 1 when a pair differs.

    python -m benchmarks.simulation_determinism [--scenario NAME ...] [--until 2h]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "functions"), str(Path(__file__).resolve().parents[1])]

from simulator.local import REPO  # noqa: E402
from simulator.sim.report import check, replay_json, summary  # noqa: E402
from simulator.sim.runner import run_scenario  # noqa: E402
from simulator.sim.scenario import load_scenario, seconds  # noqa: E402

LONG = ("large-steady", "large-steady-as-deployed")


def _one(name: str, until: float | None) -> tuple[str, dict[str, Any]]:
    scenario = load_scenario(REPO / "simulator" / "scenarios" / f"{name}.yaml")
    wall, cpu = time.monotonic(), time.process_time()
    record = run_scenario(scenario, until=until)
    results = check(record, scenario.assertions)
    facts = summary(record)
    return replay_json(record, results), {
        "wallSeconds": round(time.monotonic() - wall, 1), "cpuSeconds": round(time.process_time() - cpu, 1),
        "launches": facts["launches"], "maxNodes": facts["max_nodes"],
        "assertionsFailed": [r["assertion"] for r in results if not r["ok"]]}


def run(names: list[str], until: float | None) -> dict[str, Any]:
    out: dict[str, Any] = {"benchmark": "simulation_determinism", "until": until, "loadAverage": os.getloadavg()[0],
                           "assumptions": "process CPU includes moto's server thread (in process); wall depends on "
                                          "the machine's load, CPU much less",
                           "scenarios": {}}
    for name in names:
        first, a = _one(name, until)
        second, b = _one(name, until)
        out["scenarios"][name] = {"identical": first == second,
                                  "sha256": hashlib.sha256(first.encode()).hexdigest(),
                                  "bytes": len(first), "runs": [a, b]}
    out["identical"] = all(s["identical"] for s in out["scenarios"].values())
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", action="append", default=None, help=f"default: {', '.join(LONG)}")
    parser.add_argument("--until", default=None, help="virtual time (default: each scenario's own)")
    args = parser.parse_args()
    result = run(args.scenario or list(LONG), seconds(args.until) if args.until else None)
    print(json.dumps(result))
    return 0 if result["identical"] else 1


if __name__ == "__main__":
    sys.exit(main())
