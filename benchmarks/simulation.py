"""Simulation speed: virtual time against wall time for a large inflate-style scenario.

A Deployment of ``--pods`` one-CPU pods (plus a node-agent DaemonSet) scaled up at 10 s and back to zero
halfway, on the demo NodePool with its limits raised, for ``--until`` of virtual time, through the real
provisioner and disruption handlers (``simulator/sim``). Prints ONE JSON object: wall seconds (of the
run; moto's start excluded), how much of it the handlers took, events processed, nodes and launches.

``--scenario FILE`` runs a scenario file instead (its own ``until`` unless ``--until`` is given): issue 16's
target is ``simulator/scenarios/large-steady.yaml``, 2 virtual hours with 500 nodes and 5,000 pods, in
under 2 minutes of wall time.

    python benchmarks/simulation.py [--pods 1000] [--until 20m]
    python benchmarks/simulation.py --scenario simulator/scenarios/large-steady.yaml [--until 30m]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "functions"), str(Path(__file__).resolve().parents[1])]

from simulator.local import REPO  # noqa: E402
from simulator.sim.report import check, summary  # noqa: E402
from simulator.sim.runner import run_scenario  # noqa: E402
from simulator.sim.scenario import Scenario, load_scenario, seconds  # noqa: E402

AGENT = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "node-agent", "namespace": "kube-system"},
         "spec": {"selector": {"matchLabels": {"app": "node-agent"}}, "template": {
             "metadata": {"labels": {"app": "node-agent"}},
             "spec": {"tolerations": [{"operator": "Exists"}],
                      "containers": [{"name": "a", "resources": {"requests": {"cpu": "100m"}}}]}}}}


def scenario(*, pods: int, until: float) -> Scenario:
    pool = {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"}, "spec": {
        "template": {"spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                              "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In",
                                                "values": ["spot"]},
                                               {"key": "karpenter.k8s.aws/instance-family", "operator": "In",
                                                "values": ["m5", "c5"]}]}},
        "limits": {"cpu": 100_000, "memory": "100000Gi"},
        "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "30s"}}}
    return Scenario.model_validate({
        "name": "simulation-benchmark", "cluster": str(REPO / "clusters" / "demo.yaml"), "until": until,
        # The passes a minute apart the probe has always measured (the demo deploys the watcher and 10 minutes).
        "config": {"nodePools": [pool], "provisioner": {"reaction": "scheduled"},
                   "disruption": {"schedule": "rate(1 minute)"}},
        "initial": {"deployments": [{"name": "inflate", "replicas": 0, "cpu": "1"}], "objects": [AGENT]},
        "timeline": [{"at": 10, "scale": {"deployment": "inflate", "replicas": pods}},
                     {"at": until / 2, "scale": {"deployment": "inflate", "replicas": 0}}],
    })


def run(*, pods: int, until: float | None, path: str | None = None) -> dict[str, Any]:
    started = time.monotonic()
    chosen = load_scenario(Path(path)) if path else scenario(pods=pods, until=until or 1200.0)
    record = run_scenario(chosen, until=until)
    facts = summary(record)
    return {
        "benchmark": "simulation", "scenario": chosen.name, "pods": pods if not path else None,
        "virtualSeconds": record.until, "provisionerMode": facts["provisioner_mode"], "schedules": facts["schedules"],
        "lambdaTimeouts": facts["lambda_timeouts"], "lambdaDropped": facts["lambda_dropped"],
        "wallSeconds": facts["wall_seconds"], "handlerWallSeconds": facts["handler_wall_seconds"],
        "handlerWallByFunction": facts["handler_wall_by_function"],
        "wallSecondsWithStart": round(time.monotonic() - started, 2),
        "eventsProcessed": facts["events_processed"], "describeInstances": record.describe_instances,
        "maxNodes": facts["max_nodes"],
        "launches": facts["launches"], "duplicateLaunches": facts["duplicate_launches"],
        "podsStarted": facts["pods_started"], "timeToRunningP95": facts["time_to_running_p95"],
        "maxPendingPods": facts["max_pending_pods"], "pendingPodsAtEnd": facts["pending_pods_at_end"],
        "invocations": facts["invocations"], "handlerErrors": facts["handler_errors"],
        "assertionsFailed": [r["assertion"] for r in check(record, chosen.assertions) if not r["ok"]],
        "target": {"pods": 5000, "nodes": 500, "virtualSeconds": 7200, "wallSecondsUnder": 120},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--until", default=None, help="virtual time (default: 20m, or the scenario's own)")
    parser.add_argument("--scenario", default=None, help="a scenario file instead of the inflate-style probe")
    args = parser.parse_args()
    until = seconds(args.until) if args.until else None
    print(json.dumps(run(pods=args.pods, until=until, path=args.scenario)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
