"""Scheduling benchmark: Karpenter's own mix (five equal classes: plain, zone spread, hostname spread,
zone self-affinity, hostname anti-affinity; requests 100m-1.5 CPU and 100Mi-4Gi) on the real EC2 catalog.

Instance types and offerings are moto's real us-east-1 data; on-demand prices come from
``../shared/data/ec2-on-demand-prices.json``. The NodePool is Karpenter's default (c/m/r, generation > 2,
amd64, on-demand), so only real prices are involved. Each size runs in a fresh process (peak RSS is that
process's, input construction included); solve time is the median of ``REPEATS`` runs. The cost
bound is the LP relaxation: the cheapest fractional mix of the allowed types covering total CPU, memory
and pod count (scipy.optimize.linprog, a dev-only dependency). Prints ONE JSON object.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import random
import resource
import statistics
import sys
import time
from typing import Any

from scipy.optimize import linprog  # dev-only dependency: the LP bound

from autoscaler.domain import allocatable as alloc
from autoscaler.domain.labels import instance_type_labels
from autoscaler.domain.models import (
    LabelSelector,
    OwnerRef,
    Pod,
    PodAffinityTerm,
    TopologySpreadConstraint,
)
from autoscaler.domain.nodeclass import parse_node_class
from autoscaler.domain.nodepool import parse_node_pool, requirement_allows
from autoscaler.domain.objects import instance_type_from_ec2
from autoscaler.domain.plan import Plan, PlanInput
from autoscaler.domain.scheduling import plan
from autoscaler.domain.snapshot import _Prices, offerings_from
from benchmarks._catalog import catalog

SIZES = (1000, 5000, 20000, 50000)
REPEATS = 3
CPUS = (100, 250, 500, 1000, 1500)
MEMS = tuple(m * 2**20 for m in (100, 256, 1024, 2048, 4096))
KINDS = ("plain", "zone-spread", "hostname-spread", "zone-affinity", "hostname-anti-affinity")
ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"


def make_pods(n: int, *, mix: str, seed: int = 42) -> list[Pod]:
    rng = random.Random(seed)
    kinds = KINDS if mix == "full" else ("plain",)
    pods = []
    for i in range(n):
        kind = kinds[i % len(kinds)]
        app = f"bench-{kind}"
        sel = LabelSelector(match_labels=(("app", app),))
        spread: tuple[TopologySpreadConstraint, ...] = ()
        aff: tuple[PodAffinityTerm, ...] = ()
        anti: tuple[PodAffinityTerm, ...] = ()
        if kind == "zone-spread":
            spread = (TopologySpreadConstraint(1, ZONE, "DoNotSchedule", sel),)
        elif kind == "hostname-spread":
            spread = (TopologySpreadConstraint(1, HOST, "DoNotSchedule", sel),)
        elif kind == "zone-affinity":
            aff = (PodAffinityTerm(sel, ZONE),)
        elif kind == "hostname-anti-affinity":
            anti = (PodAffinityTerm(sel, HOST),)
        pods.append(Pod(
            namespace="default", name=f"{app}-{i}", labels={"app": app},
            requests={"cpu": rng.choice(CPUS), "memory": rng.choice(MEMS), "pods": 1},
            topology_spread=spread, pod_affinity=aff, pod_anti_affinity=anti,
            owner=OwnerRef("ReplicaSet", app, controller=True),
        ))
    return pods


def make_input(pods: list[Pod]) -> PlanInput:
    cat = catalog("us-east-1")
    types = [t for t in (instance_type_from_ec2(i) for i in cat["instanceTypes"]) if t is not None]
    pool = parse_node_pool({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
                            "spec": {"template": {"spec": {"nodeClassRef": {"name": "default"}}}}})
    nc = parse_node_class({"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
                           "metadata": {"name": "default"},
                           "spec": {"amiSelectorTerms": [{"alias": "al2023@latest"}], "role": "r",
                                    "subnetSelectorTerms": [{"id": "subnet-1"}],
                                    "securityGroupSelectorTerms": [{"id": "sg-1"}]}})
    offers = offerings_from(types, cat["offerings"], _Prices.model_validate(cat["prices"]))
    return PlanInput(node_pools=[pool], node_classes={"default": nc}, pods=pods, instance_types=types,
                     offerings=offers)


def lp_bound(snap: PlanInput, pods: list[Pod], *, min_nodes: int = 0) -> float:
    """The LP relaxation; with ``min_nodes`` also requiring that many nodes in total, still a lower
    bound when every plan needs at least that many (pods with hostname anti-affinity on one selector
    need one node each)."""
    pool = snap.node_pools[0]
    price: dict[str, float] = {}
    for o in snap.offerings:
        if o.capacity_type in pool.capacity_types:
            price[o.instance_type] = min(price.get(o.instance_type, float("inf")), o.price)
    allowed = [t for t in snap.instance_types if t.name in price and all(
        requirement_allows(r, instance_type_labels(t).get(r.key)) for r in pool.requirements
        if r.key not in (ZONE, "karpenter.sh/capacity-type"))]
    keys = ("cpu", "memory", "pods")
    demand = [sum(p.requests.get(k, 0) for p in pods) for k in keys]
    caps = [alloc.allocatable(t) for t in allowed]
    a_ub = [[-c[k] / max(demand[i], 1) for c in caps] for i, k in enumerate(keys)]
    b_ub = [-1.0] * len(keys)
    if min_nodes:
        a_ub.append([-1.0] * len(caps))
        b_ub.append(-float(min_nodes))
    result = linprog([price[t.name] for t in allowed], A_ub=a_ub, b_ub=b_ub, method="highs")
    return float(result.fun)


def check(result: Plan, pods: list[Pod]) -> None:
    seen = [k for ln in result.launches for k in ln.pods] + list(result.existing) + [
        u.pod for u in result.unschedulable]
    assert sorted(seen) == sorted(p.key for p in pods), "a pod is missing or placed twice"


def run_size(args: tuple[int, str]) -> dict[str, Any]:
    n, mix = args
    pods = make_pods(n, mix=mix)
    snap = make_input(pods)
    times, result = [], None
    for _ in range(REPEATS if n <= 20000 else 1):
        result = plan(snap, timer=time.perf_counter)
        times.append(result.solve_seconds)
    assert result is not None
    check(result, pods)
    bound = lp_bound(snap, pods)
    one_per_node = sum(1 for p in pods if p.pod_anti_affinity)
    node_bound = lp_bound(snap, pods, min_nodes=one_per_node)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    solve = statistics.median(times)
    return {"pods": n, "mix": mix, "solveSeconds": round(solve, 3), "podsPerSecond": round(n / solve),
            "peakMemoryMiB": round(peak / 2**20, 1), "nodesLaunched": len(result.launches),
            "unschedulable": len(result.unschedulable), "planCostPerHour": round(result.hourly_price, 3),
            "lpBoundPerHour": round(bound, 3), "costRatio": round(result.hourly_price / bound, 4),
            "lpNodeCountBoundPerHour": round(node_bound, 3),
            "costRatioNodeCountBound": round(result.hourly_price / node_bound, 4),
            "runs": len(times)}


def main() -> None:
    sizes = [int(a) for a in sys.argv[1:]] or list(SIZES)
    ctx = mp.get_context("spawn")
    results = []
    for mix in ("full", "plain"):
        for n in sizes:
            with ctx.Pool(1) as pool:
                results.append(pool.map(run_size, [(n, mix)])[0])
    print(json.dumps({"benchmark": "scheduling", "instanceTypes": "moto us-east-1 catalog, Karpenter default "
                      "NodePool (c/m/r gen>2 amd64 on-demand)", "results": results}))


if __name__ == "__main__":
    main()
