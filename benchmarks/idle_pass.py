"""The duration of an idle provisioner pass and an idle disruption run, as ``benchmarks/cost.py`` bills them.

A local account (moto) and cluster (the Kubernetes API emulator) with the demo configuration, no pending
pod and no node; the real handlers, warm after one cold invocation each, run once per schedule period for
an hour of virtual time (a manual clock advanced by the period between runs): every 10 minutes for the
provisioner's safety pass, every minute for the disruption run. The catalogue is NOT primed: each run
reads what a Lambda container would read, when its caches say so (the instance catalogue is kept an
hour, prices 12 h / 5 min), so the hour's mean is what a month of such runs costs.

CPU seconds are those of the invoking thread only (moto and the emulator serve from other threads: the
services' side on AWS). The Lambda estimate is ``cpu / 0.58`` (a 1,024 MB function gets about 0.58 of a
vCPU of this machine, benchmarks/provisioner_pass.py) plus the API round trips, assumed 15 ms per
Kubernetes request and 150 ms per AWS call made. Prints ONE JSON object.

    python -m benchmarks.idle_pass
"""

from __future__ import annotations

import json
import logging
import statistics
import time
from typing import Any

from autoscaler.adapters.clock import ManualClock
from simulator.local import LocalCluster

LAMBDA_CPU_SHARE = 0.58  # of this machine's vCPU, at 1,024 MB
KUBE_REQUEST_SECONDS = 0.015
AWS_CALL_SECONDS = 0.150
HOUR = 3600


def _runs(local: LocalCluster, clock: ManualClock, *, period: int, invoke: Any) -> list[dict[str, float]]:
    out = []
    for _ in range(HOUR // period):
        cloud_before = sum(local._runtime.cloud.calls.values()) if local._runtime else 0
        kube_before = sum(local.kube.requests().values())
        cpu = time.thread_time()
        invoke()
        cpu = time.thread_time() - cpu
        rt = local._runtime
        aws = (sum(rt.cloud.calls.values()) if rt else 0) - cloud_before
        kube = sum(local.kube.requests().values()) - kube_before
        out.append({"cpu": cpu, "aws_calls": aws, "kube_requests": kube,
                    "lambda_seconds": cpu / LAMBDA_CPU_SHARE + aws * AWS_CALL_SECONDS + kube * KUBE_REQUEST_SECONDS})
        clock.advance(period)
    return out


def _summary(runs: list[dict[str, float]]) -> dict[str, Any]:
    secs = [r["lambda_seconds"] for r in runs]
    return {"runs": len(runs), "mean_lambda_seconds": round(statistics.fmean(secs), 3),
            "median_lambda_seconds": round(statistics.median(secs), 3), "max_lambda_seconds": round(max(secs), 3),
            "median_cpu_seconds": round(statistics.median(r["cpu"] for r in runs), 3),
            "aws_calls": [int(r["aws_calls"]) for r in runs], "kube_requests": [int(r["kube_requests"]) for r in runs]}


def measure() -> dict[str, Any]:
    """Idle provisioner and disruption durations (the mean over an hour is what the bill uses)."""
    from autoscaler.handlers.disruption import handler as disruption  # noqa: PLC0415 - Powertools set-up

    logging.disable(logging.WARNING)
    try:
        with LocalCluster.start() as local:
            local.catalog = None  # read the catalogue as a container does, not primed by the simulator
            clock = ManualClock()
            local.runtime(clock=clock)
            local.invoke_provisioner()  # cold: discarded
            local.invoke(disruption, {"source": "schedule", "kind": "disruption"}, function_name="disruption")
            # An hour on: the first measured run pays the hourly catalogue refresh, as one run an hour does.
            clock.advance(HOUR)
            period = local.config.provisioner.period_seconds
            provisioner = _runs(local, clock, period=period, invoke=local.invoke_provisioner)
            disruption_runs = _runs(local, clock, period=60, invoke=lambda: local.invoke(
                disruption, {"source": "schedule", "kind": "disruption"}, function_name="disruption"))
    finally:
        logging.disable(logging.NOTSET)
    return {"provisioner": {"period_seconds": period, **_summary(provisioner)},
            "disruption": {"period_seconds": 60, **_summary(disruption_runs)}}


def main() -> None:
    result = measure()
    result["assumptions"] = {
        "lambda_cpu_share": LAMBDA_CPU_SHARE, "kube_request_seconds": KUBE_REQUEST_SECONDS,
        "aws_call_seconds": AWS_CALL_SECONDS, "cpu": "invoking thread only (moto and the emulator excluded)",
        "cluster": "clusters/demo.yaml, no pending pod, no node, warm after one cold run",
        "figure_billed": "mean over an hour of virtual time (the catalogue and price refreshes included)"}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
