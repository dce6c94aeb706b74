"""AWS calls and time for a cold and a warm "prepare to launch" (catalog, prices, subnets, security
groups, AMI, launch template) against moto's full us-east-1 catalog. Prints one JSON object.

Cold = a new Lambda container (fresh ``AwsCloud``); warm = the same container a minute later, within
every cache's TTL. Target: a warm prepare makes zero catalog calls. Times are moto's in-process
serialisation, not real AWS latency: compare them with each other, not with production.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import boto3
from botocore.stub import Stubber
from moto import mock_aws

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "functions"))

from autoscaler.adapters.aws.cloud import AwsCloud
from autoscaler.adapters.clock import ManualClock
from autoscaler.app.launcher import new_claim_id
from autoscaler.domain.fleet import FleetRequest
from tests.adapters.aws.helpers import (
    CLUSTER,
    REGION,
    make_network,
    node_class,
    on_demand_prices,
    price_list_item,
    seed_eks_amis,
)

COLD_RUNS = int(os.environ.get("BENCH_COLD_RUNS", "3"))
WARM_RUNS = min(5, int(os.environ.get("BENCH_WARM_RUNS", "5")))  # 5 x 10 s stays under 60 s
CATALOG_OPS = ("describe_instance_types", "describe_instance_type_offerings")


def _queue_prices(stub: Stubber, prices: dict[str, float]) -> None:
    items = [price_list_item(n, p) for n, p in sorted(prices.items())]
    pages = [items[i:i + 100] for i in range(0, len(items), 100)]
    for n, page in enumerate(pages):
        resp: dict[str, Any] = {"FormatVersion": "aws_v1", "PriceList": page}
        if n + 1 < len(pages):
            resp["NextToken"] = f"p{n + 1}"
        stub.add_response("get_products", resp)


def _prepare(cloud: AwsCloud, request: FleetRequest) -> dict[str, int]:
    before = Counter(cloud.calls)
    t0 = time.perf_counter()
    types = cloud.instance_types()
    offerings = cloud.offerings()
    cloud.prepare(request)
    elapsed = time.perf_counter() - t0
    assert types and offerings
    delta = Counter(cloud.calls)
    delta.subtract(before)
    out = {op: n for op, n in delta.items() if n}
    out["_ms"] = round(elapsed * 1000)
    return out


def main() -> None:
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        os.environ[key] = "testing"
    os.environ.pop("AWS_ENDPOINT_URL", None)
    prices = on_demand_prices()
    cold: list[dict[str, int]] = []
    warm: list[dict[str, int]] = []
    with mock_aws():
        ec2 = boto3.client("ec2", region_name=REGION)
        ssm = boto3.client("ssm", region_name=REGION)
        iam = boto3.client("iam", region_name=REGION)
        make_network(ec2)
        seed_eks_amis(ec2)
        iam.create_role(RoleName="KarpenterNodeRole", AssumeRolePolicyDocument="{}")
        nc = node_class(role="KarpenterNodeRole", instanceProfile=None)
        n_types = 0
        for _ in range(COLD_RUNS):
            pricing = boto3.client("pricing", region_name="us-east-1")
            clock = ManualClock()
            cloud = AwsCloud(ec2=ec2, ssm=ssm, iam=iam, pricing=pricing, region=REGION, cluster=CLUSTER, clock=clock)
            request = FleetRequest(
                claim_id=new_claim_id("general"), cluster_name=CLUSTER.name, node_pool="general", node_class=nc,
                capacity_types=("spot", "on-demand"), instance_types=("m5.large", "m6g.large", "c5.large"),
            )
            with Stubber(pricing) as stub:
                _queue_prices(stub, prices)
                cold.append(_prepare(cloud, request))
                for _ in range(WARM_RUNS):
                    clock.advance(10)  # a later invocation, still within every TTL (network: 60 s)
                    warm.append(_prepare(cloud, request))
            n_types = len(cloud.instance_types())

    def calls(run: dict[str, int]) -> int:
        return sum(n for op, n in run.items() if op != "_ms")

    def catalog(run: dict[str, int]) -> int:
        return sum(run.get(op, 0) for op in CATALOG_OPS)

    result = {
        "benchmark": "aws_prepare",
        "region": REGION,
        "instanceTypes": n_types,
        "cold": {"medianMs": statistics.median(r["_ms"] for r in cold), "calls": calls(cold[0]),
                 "catalogCalls": catalog(cold[0]), "byOperation": {k: v for k, v in cold[0].items() if k != "_ms"}},
        "warm": {"medianMs": statistics.median(r["_ms"] for r in warm), "calls": max(calls(r) for r in warm),
                 "catalogCalls": max(catalog(r) for r in warm),
                 "byOperation": dict(sum((Counter({k: v for k, v in r.items() if k != "_ms"}) for r in warm),
                                         Counter()))},
        "runs": {"cold": COLD_RUNS, "warm": WARM_RUNS * COLD_RUNS},
        "targetWarmCatalogCallsZero": all(catalog(r) == 0 for r in warm),
    }
    result["coldOverWarm"] = round(result["cold"]["medianMs"] / max(result["warm"]["medianMs"], 0.001), 1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
