"""The product as deployed against the Cluster Autoscaler baseline on the five guide scenarios.

Each scenario (inflate, hpa-burst, banana, migrate-from-cluster-autoscaler, spot-interruption) runs twice
in virtual time: once through the product's real handlers on the demo cluster file's platform as it
deploys (the scenario's ``provisioner`` / ``disruption`` overrides dropped: the watcher wakes the
provisioner, its schedule is the 10-minute safety pass, disruption every 10 minutes), once under the
Cluster Autoscaler baseline (``simulator/sim/baseline.py``: an ASG per NodePool, zone, family, size and
capacity type, priority then least-waste expander, CA's defaults). The scenarios' own assertions are
written for scheduled mode and are not checked here. Prints ONE JSON object (and a table on stderr).

    python -m benchmarks.ca_baseline [--scenarios inflate,hpa-burst]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from simulator.local import REPO
from simulator.sim.report import summary
from simulator.sim.runner import run_scenario
from simulator.sim.scenario import ProvisionerMode, Scenario, load_scenario

GUIDES = ("inflate", "hpa-burst", "banana", "migrate-from-cluster-autoscaler", "spot-interruption")
KEYS = ("dollars", "pending_pod_seconds", "time_to_running_p95", "max_nodes", "pods_never_running",
        "launches", "capacity_errors")


def as_deployed(scenario: Scenario) -> Scenario:
    """The scenario on its cluster file's platform as deployed: no schedule or reaction overrides."""
    config = {k: v for k, v in scenario.config.items() if k not in ("provisioner", "disruption")}
    return scenario.model_copy(update={"config": config, "provisioner": ProvisionerMode()})


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 3) if b else None


def compare(name: str) -> dict[str, Any]:
    scenario = as_deployed(load_scenario(REPO / "simulator" / "scenarios" / f"{name}.yaml"))
    started = time.monotonic()
    ours = summary(run_scenario(scenario))
    base_record = run_scenario(scenario, policy="cluster-autoscaler")
    base = summary(base_record)
    groups = sorted({text.split()[1] for _, src, text in base_record.timeline
                     if src == "cluster-autoscaler" and text.startswith("scale-up:")})
    return {
        "scenario": name, "provisionerMode": ours["provisioner_mode"], "schedules": ours["schedules"],
        "ours": {k: ours.get(k) for k in KEYS}, "baseline": {k: base.get(k) for k in KEYS},
        "baselineGroupsScaled": groups,
        "baselineFailedScaleUps": sum(1 for _, src, text in base_record.timeline
                                      if src == "cluster-autoscaler" and "failed" in text),
        "dollarRatio": _ratio(ours["dollars"], base["dollars"]),
        "pendingRatio": _ratio(ours["pending_pod_seconds"], base["pending_pod_seconds"]),
        "wallSeconds": round(time.monotonic() - started, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ca_baseline", description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", default=",".join(GUIDES))
    args = parser.parse_args()
    rows = [compare(n) for n in args.scenarios.split(",") if n]
    head = f"{'scenario':<34}{'ours $':>9}{'CA $':>9}{'$ ratio':>9}{'ours pod·s':>12}{'CA pod·s':>10}{'ratio':>7}"
    print(head, file=sys.stderr)
    for r in rows:
        print(f"{r['scenario']:<34}{r['ours']['dollars']:>9.4f}{r['baseline']['dollars']:>9.4f}"
              f"{r['dollarRatio'] or 0:>9.2f}{r['ours']['pending_pod_seconds']:>12g}"
              f"{r['baseline']['pending_pod_seconds']:>10g}{r['pendingRatio'] or 0:>7.2f}", file=sys.stderr)
    print(json.dumps({"benchmark": "ca-baseline", "loadAverage": [round(x, 2) for x in os.getloadavg()],
                      "assumptions": ["product as deployed: demo cluster file's watcher, 10-minute safety pass, "
                                      "disruption every 10 minutes",
                                      "baseline: simulator/sim/baseline.py defaults (docs/simulation.md)",
                                      "ratios are ours / baseline's (below 1: better for us)"],
                      "scenarios": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
