"""Scheduling benchmark: Karpenter's own mix (five equal classes: plain, zone spread, hostname spread,
zone self-affinity, hostname anti-affinity; requests 100m-1.5 CPU and 100Mi-4Gi) on the real EC2 catalog.

Instance types and offerings are moto's real us-east-1 data; on-demand prices come from
``../shared/data/ec2-on-demand-prices.json``. The NodePool is Karpenter's default (c/m/r, generation > 2,
amd64, on-demand), so only real prices are involved. Each size runs in a fresh process (peak RSS is that
process's, input construction included); solve time is the median of ``REPEATS`` runs. Cost is
judged against the whole-pod bound (``whole_pod_bound``): an LP in which every pod class is placed on
types it fits, at most as many of its pods per node as fit whole, with one node per pod of a
required-hostname-anti-affinity group; the older LP relaxation (a fractional cover of total CPU, memory
and pod count) is printed too. A third mix, "gpu", puts 1-, 4- and 8-GPU pods on a g5/g6 NodePool.
scipy.optimize.linprog (a dev-only dependency) solves both. Prints ONE JSON object.
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

from scipy.optimize import linprog  # dev-only dependency: the LP bounds
from scipy.sparse import coo_matrix

from autoscaler.domain import allocatable as alloc
from autoscaler.domain.instance_types import instance_type_from_ec2
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
GPU_PODS = 1000  # the GPU mix runs at this size only


GPU = "nvidia.com/gpu"
GPU_SHAPES = ((1, 4000, 16), (1, 2000, 8), (4, 16000, 64), (8, 32000, 128))  # (GPUs, CPU m, memory GiB)


def make_gpu_pods(n: int, *, seed: int = 42) -> list[Pod]:
    """Mostly 1-GPU pods with some 4- and 8-GPU ones: sizes no single instance type packs well."""
    rng = random.Random(seed)
    pods = []
    for i in range(n):
        gpus, cpu, mem = GPU_SHAPES[0] if i % 10 < 5 else GPU_SHAPES[1] if i % 10 < 8 else rng.choice(GPU_SHAPES[2:])
        app = f"gpu-{gpus}"
        pods.append(Pod(namespace="default", name=f"{app}-{i}", labels={"app": app},
                        requests={"cpu": cpu, "memory": mem * 2**30, "pods": 1, GPU: gpus},
                        owner=OwnerRef("ReplicaSet", app, controller=True)))
    return pods


def make_pods(n: int, *, mix: str, seed: int = 42) -> list[Pod]:
    if mix == "gpu":
        return make_gpu_pods(n, seed=seed)
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


def make_input(pods: list[Pod], *, mix: str = "full") -> PlanInput:
    cat = catalog("us-east-1")
    types = [t for t in (instance_type_from_ec2(i) for i in cat["instanceTypes"]) if t is not None]
    gpu_families = {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["g5", "g6"]}
    reqs = [gpu_families] if mix == "gpu" else []
    pool = parse_node_pool({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
                            "spec": {"template": {"spec": {"nodeClassRef": {"name": "default"},
                                                           "requirements": reqs}}}})
    nc = parse_node_class({"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
                           "metadata": {"name": "default"},
                           "spec": {"amiSelectorTerms": [{"alias": "al2023@latest"}], "role": "r",
                                    "subnetSelectorTerms": [{"id": "subnet-1"}],
                                    "securityGroupSelectorTerms": [{"id": "sg-1"}]}})
    offers = offerings_from(types, cat["offerings"], _Prices.model_validate(cat["prices"]))
    return PlanInput(node_pools=[pool], node_classes={"default": nc}, pods=pods, instance_types=types,
                     offerings=offers)


def _allowed_prices(snap: PlanInput) -> dict[str, float]:
    pool = snap.node_pools[0]
    price: dict[str, float] = {}
    for o in snap.offerings:
        if o.capacity_type in pool.capacity_types:
            price[o.instance_type] = min(price.get(o.instance_type, float("inf")), o.price)
    types = {t.name: t for t in snap.instance_types}
    return {name: p for name, p in price.items() if name in types and all(
        requirement_allows(r, instance_type_labels(types[name]).get(r.key)) for r in pool.requirements
        if r.key not in (ZONE, "karpenter.sh/capacity-type"))}


def whole_pod_bound(snap: PlanInput, pods: list[Pod]) -> float:
    """A lower bound on any plan's hourly cost that treats pods as whole: nodes y_t of each allowed type
    (fractional) and pods x_kt of each class k on type t, with every class placed, per type and resource
    the pods within the nodes' allocatable, at most floor(allocatable / request) pods of a class per node,
    and at most one pod per node of each group of pods with required hostname anti-affinity on their own
    selector. Every real plan satisfies these, so the LP optimum is a valid bound. Types another type
    beats (no dearer, at least as much of everything) are left out: that never raises the optimum."""
    price = _allowed_prices(snap)
    types = {t.name: t for t in snap.instance_types}
    keys = sorted({k for p in pods for k, v in p.requests.items() if v > 0})
    caps = {name: alloc.allocatable(types[name]) for name in price}
    cand = sorted(price, key=lambda n: (price[n], n))
    kept: list[str] = []
    for name in cand:  # cheapest first: a type is dropped if a kept one is no dearer and no smaller
        if not any(all(caps[k].get(r, 0) >= caps[name].get(r, 0) for r in keys) for k in kept):
            kept.append(name)
    classes: dict[tuple[tuple[int, ...], str], int] = {}
    for p in pods:
        group = ""
        for t in p.pod_anti_affinity:
            if t.topology_key == HOST and t.label_selector is not None and t.label_selector.matches(p.labels):
                group = str(t.label_selector.match_labels)
        key = (tuple(p.requests.get(k, 0) for k in keys), group)
        classes[key] = classes.get(key, 0) + 1
    n_t = len(kept)
    cols: list[tuple[int, int]] = []  # (class index, type index) of each x variable, after the y's
    fit: list[int] = []
    for ki, ((req, _), _n) in enumerate(classes.items()):
        for ti, name in enumerate(kept):
            f = min((caps[name].get(r, 0) // v for r, v in zip(keys, req, strict=True) if v > 0), default=0)
            if f > 0:
                cols.append((ki, ti))
                fit.append(f)
    class_list = list(classes)
    rows, cidx, vals = [], [], []
    for ri, res_key in enumerate(keys):  # resources per type: row ri * n_t + ti
        for ti, name in enumerate(kept):
            rows.append(ri * n_t + ti)
            cidx.append(ti)
            vals.append(-float(caps[name].get(res_key, 0)))
    for j, (ki, ti) in enumerate(cols):
        for ri, req in enumerate(class_list[ki][0]):
            if req:
                rows.append(ri * n_t + ti)
                cidx.append(n_t + j)
                vals.append(float(req))
    r = len(keys) * n_t
    for j, (_ki, ti) in enumerate(cols):  # whole pods per node
        rows += [r, r]
        cidx += [n_t + j, ti]
        vals += [1.0, -float(fit[j])]
        r += 1
    group_row: dict[tuple[str, int], int] = {}
    for j, (ki, ti) in enumerate(cols):  # one pod of an anti-affinity group per node
        g = class_list[ki][1]
        if not g:
            continue
        if (g, ti) not in group_row:
            group_row[(g, ti)] = r
            rows.append(r)
            cidx.append(ti)
            vals.append(-1.0)
            r += 1
        rows.append(group_row[(g, ti)])
        cidx.append(n_t + j)
        vals.append(1.0)
    b_ub = [0.0] * r
    a_ub = coo_matrix((vals, (rows, cidx)), shape=(r, n_t + len(cols))).tocsr()
    eq_rows = [ki for ki, _ in cols]
    a_eq = coo_matrix(([1.0] * len(cols), (eq_rows, [n_t + j for j in range(len(cols))])),
                      shape=(len(classes), n_t + len(cols))).tocsr()
    b_eq = [float(n) for n in classes.values()]
    cost = [price[name] for name in kept] + [0.0] * len(cols)
    result = linprog(cost, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=b_eq, method="highs")
    assert result.status == 0, result.message
    return float(result.fun)


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
    snap = make_input(pods, mix=mix)
    times, result = [], None
    for _ in range(REPEATS if n <= 20000 else 1):
        result = plan(snap, timer=time.perf_counter)
        times.append(result.solve_seconds)
    assert result is not None
    check(result, pods)
    bound = lp_bound(snap, pods)
    one_per_node = sum(1 for p in pods if p.pod_anti_affinity)
    node_bound = lp_bound(snap, pods, min_nodes=one_per_node)
    whole = whole_pod_bound(snap, pods)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    solve = statistics.median(times)
    return {"pods": n, "mix": mix, "solveSeconds": round(solve, 3), "podsPerSecond": round(n / solve),
            "peakMemoryMiB": round(peak / 2**20, 1), "nodesLaunched": len(result.launches),
            "unschedulable": len(result.unschedulable), "planCostPerHour": round(result.hourly_price, 3),
            "lpBoundPerHour": round(bound, 3), "costRatio": round(result.hourly_price / bound, 4),
            "lpNodeCountBoundPerHour": round(node_bound, 3),
            "costRatioNodeCountBound": round(result.hourly_price / node_bound, 4),
            "wholePodBoundPerHour": round(whole, 3), "costRatioWholePodBound": round(result.hourly_price / whole, 4),
            "runs": len(times)}


def main() -> None:
    sizes = [int(a) for a in sys.argv[1:]] or list(SIZES)
    ctx = mp.get_context("spawn")
    results = []
    runs = [(n, mix) for mix in ("full", "plain") for n in sizes] + [(GPU_PODS, "gpu")]
    for n, mix in runs:
        with ctx.Pool(1) as pool:
            results.append(pool.map(run_size, [(n, mix)])[0])
    print(json.dumps({"benchmark": "scheduling", "instanceTypes": "moto us-east-1 catalog, Karpenter default "
                      "NodePool (c/m/r gen>2 amd64 on-demand)", "results": results}))


if __name__ == "__main__":
    main()
