"""Side by side with Karpenter: its own provisioning scheduler (built from sigs.k8s.io/karpenter, see
``benchmarks/peers/karpenter``) and ours on the same snapshots, judged by the same fit check.

``python -m benchmarks.peers [--sizes 1000,5000 | --sizes all] [--repeats N] [--karpenter-solve-bound S]
[--karpenter-timeout S] [--budget S] [--out FILE]``. Default sizes: 1000 only, so ``make bench`` stays short;
``--sizes all`` runs 1k / 5k / 20k / 50k pods. Every workload runs without and with existing nodes (a managed
node group of max(3, pods / 100) nodes, half used by resident pods). Within an entry the two planners run
alternately (ours, then Karpenter's, ``--repeats`` times, default 1; always one run above 5,000 pods), each
timed around the planner alone (ours: ``plan()`` on the parsed snapshot; Karpenter: NewTopology + NewScheduler +
Solve + TruncateInstanceTypes), wall clock and CPU; figures are medians. Karpenter's Solve runs under the
one-minute context its provisioner gives it (``--karpenter-solve-bound``, 0: to the end); the pods it has not
reached by then are placed by its later rounds, each seeing the earlier rounds' NodeClaims
(``--karpenter-rounds``, 1: the first round only); pods still deferred when the rounds stop leave that entry
without a cost ratio, with ``costRatioAtMost`` (ours over the $/h its rounds had launched) bounding it. A Karpenter run
that does not finish within ``--karpenter-timeout`` is recorded as such and that workload is not given to
Karpenter at larger sizes; with ``--budget`` the entries not started in time are recorded as not run. Cost is
the $/h of the nodes each launches, each node at the cheapest offering its launch allows; each side's ``packing``
(the fit check's measure: vCPUs of its new nodes, the share of their allocatable CPU and memory requested, $ per
vCPU-hour) says whether a dearer plan buys more vCPUs or dearer ones, and its ``mix`` (vCPUs, allocatable memory
per vCPU and $/h by capacity type, instance category and node size) which vCPUs are the dearer. Prints ONE JSON object
on stdout and the table on stderr (``--out`` also writes the JSON after every entry). The peer binary is cached
in ``~/.cache/eks-autoscaler`` keyed by its sources.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from autoscaler.domain.plan import Plan
from autoscaler.domain.scheduling import plan
from autoscaler.domain.snapshot import parse_snapshot
from benchmarks._fit import HOST, ZONE, FitCheck, type_info
from benchmarks._peer_workloads import WORKLOADS, snapshot, zone_affinity_pair

PEER = Path(__file__).parent / "peers" / "karpenter"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "eks-autoscaler"
GO_TOOLCHAIN = "go1.27.3"  # sigs.k8s.io/karpenter v1.15.0 needs go >= 1.26.9
ALL_SIZES = (1000, 5000, 20000, 50000)
DEFAULT_SIZES = (1000,)
# sigs.k8s.io/karpenter's provisioner runs Solve under a one-minute context (provisioner.go, Schedule): what it
# placed by then is launched, the other pods stay pending for its next round.
KARPENTER_SOLVE_BOUND = 60.0
# Rounds Karpenter's provisioner gets to place every pod when its Solve is bounded (--karpenter-rounds).
MAX_ROUNDS = 200
KARPENTER_MIX_TARGET = 0.95
TARGET = 1.00


class PeerUnavailable(RuntimeError):
    """The Karpenter peer could not be built; the message holds the command and its output."""


def peer_binary() -> Path:
    """Build the peer once per source version (go.mod, go.sum, main.go) and reuse it."""
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum", "main.go"):
        digest.update((PEER / name).read_bytes())
    binary = CACHE / f"karpenter-peer-{digest.hexdigest()[:16]}"
    if binary.exists():
        return binary
    go = shutil.which("go")
    if go is None:
        raise PeerUnavailable("go is not on PATH: install Go >= 1.26 to build benchmarks/peers/karpenter")
    CACHE.mkdir(parents=True, exist_ok=True)
    cmd = ["nice", "-n", "10", go, "build", "-mod=mod", "-o", str(binary) + ".partial", "."]
    env = {**os.environ, "GOTOOLCHAIN": GO_TOOLCHAIN, "GOFLAGS": "-buildvcs=false"}
    print(f"building the Karpenter peer: {' '.join(cmd)} (in {PEER})", file=sys.stderr)
    proc = subprocess.run(cmd, cwd=PEER, env=env, capture_output=True, text=True, timeout=3600, check=False)
    if proc.returncode != 0:
        raise PeerUnavailable(f"GOTOOLCHAIN={GO_TOOLCHAIN} {' '.join(cmd)} failed:\n{proc.stderr[-4000:]}")
    os.replace(str(binary) + ".partial", binary)
    return binary


def run_karpenter(binary: Path, path: Path, timeout: float, solve_bound: float = 0.0) -> dict[str, Any] | None:
    """One run of the peer on the snapshot at ``path``; None when it did not finish within ``timeout`` s.
    ``solve_bound`` > 0 bounds its Solve as Karpenter's provisioner does (0: unbounded)."""
    cmd = [str(binary), "-input", str(path)]
    if solve_bound > 0:
        cmd += ["-solve-timeout", f"{solve_bound:g}s"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return None
    if proc.returncode != 0:
        raise RuntimeError(f"karpenter peer failed on {path}: {proc.stderr[-2000:]}")
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


def in_flight_node(name: str, claim: dict[str, Any], snap: dict[str, Any],
                   types: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A NodeClaim of an earlier round as Karpenter's next round sees it: a node of its NodePool with the
    launched instance type's labels, the pool's template labels and taints, and the allocatable Karpenter
    expects of that type (its in-flight NodeClaim's), not yet carrying any DaemonSet pod (Karpenter reserves
    their requests itself)."""
    pool = next(p for p in snap["nodePools"] if p["metadata"]["name"] == claim["nodePool"])
    template = pool["spec"]["template"]
    pool_labels = (template.get("metadata") or {}).get("labels") or {}
    labels = {**type_info(types[claim["instanceType"]]).labels, **pool_labels,
              ZONE: claim["zone"], HOST: name, "karpenter.sh/capacity-type": claim["capacityType"],
              "karpenter.sh/nodepool": claim["nodePool"], "karpenter.sh/registered": "true",
              "karpenter.sh/initialized": "true"}
    alloc = dict(claim["allocatable"])
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
            "spec": {"providerID": f"aws:///{claim['zone']}/{name}",
                     "taints": list(template["spec"].get("taints") or ())},
            "status": {"capacity": alloc, "allocatable": alloc, "conditions": [{"type": "Ready", "status": "True"}]}}


def next_round(snap: dict[str, Any], out: dict[str, Any], round_no: int,
               types: dict[str, dict[str, Any]]) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The snapshot Karpenter's next round reads after ``out``: each NodeClaim launched becomes a node with
    its pods on it, the pods placed on existing nodes are bound there, the rest stay pending. Also returns
    the new nodes' names -> their NodeClaims."""
    where: dict[str, str] = {}
    for node, pods in out["existingNodePods"].items():
        where.update(dict.fromkeys(pods, node))
    claims: dict[str, dict[str, Any]] = {}
    nodes = list(snap["nodes"])
    for i, claim in enumerate(out["nodeClaims"]):
        if not claim["instanceType"]:
            continue  # no offering to launch: its pods stay pending
        name = f"karpenter-round{round_no}-{i}.ec2.internal"
        nodes.append(in_flight_node(name, claim, snap, types))
        claims[name] = claim
        where.update(dict.fromkeys(claim["pods"], name))
    pods = []
    for raw in snap["pods"]:
        meta = raw["metadata"]
        node = where.get(f"{meta.get('namespace') or 'default'}/{meta['name']}")
        bound = node is not None and not raw["spec"].get("nodeName")
        running = {**raw, "spec": {**raw["spec"], "nodeName": node}, "status": {"phase": "Running"}}
        pods.append(running if bound else raw)
    return {**snap, "pods": pods, "nodes": nodes}, claims


def run_karpenter_rounds(binary: Path, snap: dict[str, Any], first: dict[str, Any], path: Path, *,
                         timeout: float, solve_bound: float, max_rounds: int) -> dict[str, Any]:
    """Karpenter's provisioner round after round, as in production: each round's Solve is bounded, its
    NodeClaims are launched, and the next round schedules the pods still pending with those NodeClaims among
    the nodes (their pods bound to them: as if each round's nodes had registered and kube-scheduler had bound
    its pods before the next round started). ``first`` is round one's output. Stops when no pod is deferred,
    when a round places none, after ``max_rounds`` or at ``timeout`` (wall, all rounds). Returns the NodeClaims
    of every round (pods placed on a NodeClaim by a later round added to it), the placements on the
    snapshot's own nodes, the last round's unschedulable pods and each round's figures."""
    started = time.monotonic()
    types = {t["InstanceType"]: t for t in snap["instanceTypes"]}
    own_nodes = {n["metadata"]["name"] for n in snap["nodes"]}
    claims: dict[str, dict[str, Any]] = {}
    existing: dict[str, list[str]] = {}
    rounds: list[dict[str, Any]] = []
    out, current, stopped = first, snap, None
    while True:
        placed = sum(len(c["pods"]) for c in out["nodeClaims"]) + sum(map(len, out["existingNodePods"].values()))
        rounds.append({"solveSeconds": out["solveSeconds"], "solveCpuSeconds": out.get("solveCpuSeconds"),
                       "pendingPods": out["pendingPods"], "placed": placed, "nodeClaims": len(out["nodeClaims"]),
                       # pods this round put on the nodes of earlier rounds' NodeClaims (their room costs nothing)
                       "onEarlierNodes": sum(len(p) for n, p in out["existingNodePods"].items() if n in claims),
                       "costPerHour": round(out["totalPerHour"], 4), "deferred": out.get("deferredPods", 0)})
        for node, pods in out["existingNodePods"].items():
            if node in claims:
                claims[node] = {**claims[node], "pods": claims[node]["pods"] + pods}
            else:
                existing.setdefault(node, []).extend(pods)
        current, new = next_round(current, out, len(rounds), types)
        claims.update(new)
        if not out.get("deferredPods"):
            break
        if placed == 0:
            stopped = f"round {len(rounds)} placed no pod within its bound"
            break
        if len(rounds) >= max_rounds:
            stopped = f"the round limit ({max_rounds}) was reached"
            break
        left = timeout - (time.monotonic() - started)
        path.write_text(json.dumps(current))
        nxt = run_karpenter(binary, path, left, solve_bound) if left > 0 else None
        if nxt is None:
            stopped = f"round {len(rounds) + 1} did not finish within the {timeout:.0f} s given to all rounds"
            break
        out = nxt
    unpriced = [c for c in out["nodeClaims"] if not c["instanceType"]]
    assert set(existing) <= own_nodes, "a placement on a node that is neither the snapshot's nor a NodeClaim's"
    return {"nodeClaims": list(claims.values()) + unpriced, "existingNodePods": existing,
            "unschedulable": out["unschedulable"], "deferredPods": out.get("deferredPods", 0),
            "rounds": rounds, "stopped": stopped}


def our_nodes(result: Plan, snap: dict[str, Any]) -> list[dict[str, Any]]:
    """Each launch at the cheapest offering it allows (what CreateFleet's lowest-price picks)."""
    spot = snap["prices"]["spot"]
    od = snap["prices"]["onDemand"]
    out = []
    for ln in result.launches:
        best: tuple[float, str, str] | None = None
        for it in ln.instance_types:
            for zone in ln.zones:
                price = spot.get(zone, {}).get(it) if ln.capacity_type == "spot" else od.get(it)
                if price is not None and (best is None or (price, it, zone) < best):
                    best = (price, it, zone)
        assert best is not None, f"launch {ln} has no priced offering"
        out.append({"instanceType": best[1], "zone": best[2], "capacityType": ln.capacity_type,
                    "nodePool": ln.node_pool, "pods": list(ln.pods), "price": best[0]})
    return out


def existing_assignments(pairs: dict[str, str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for pod, node in pairs.items():
        out.setdefault(node, []).append(pod)
    return out


def _ours(parsed: Any) -> tuple[Plan, float, float]:
    """Our planner on the parsed snapshot: the plan, its solve seconds (wall) and the CPU seconds spent."""
    cpu = time.process_time()
    result = plan(parsed, timer=time.perf_counter)
    return result, result.solve_seconds, time.process_time() - cpu


def _packing(check: FitCheck, planned: list[dict[str, Any]], prices: list[float]) -> dict[str, Any]:
    """The fit check's measure of how full a side's new nodes are, with what a vCPU of them costs, and where the
    vCPUs and dollars went (``mix``): ``planned[i]`` launched at ``prices[i]`` $/h."""
    out = check.packing(planned)
    per_hour = sum(prices)
    out["dollarsPerVcpuHour"] = round(per_hour / out["vcpus"], 5) if out["vcpus"] else None
    out["mix"] = _mix(check, planned, prices)
    return out


def _mix(check: FitCheck, planned: list[dict[str, Any]], prices: list[float]) -> dict[str, Any]:
    """vCPUs, allocatable memory and $/h of a side's new nodes by capacity type, by instance category (c, m, r,
    ...) and by node size in vCPUs: which of them makes one side's vCPU dearer than the other's."""
    groups: dict[str, dict[str, dict[str, float]]] = {"capacityType": {}, "category": {}, "size": {}}
    for node, price in zip(planned, prices, strict=True):
        t = check.types[node["instanceType"]]
        labels = t.labels
        vcpus = int(labels["karpenter.k8s.aws/instance-cpu"])
        mem = t.allocatable["memory"] / 2**30
        keys = {"capacityType": node["capacityType"],
                "category": labels.get("karpenter.k8s.aws/instance-category", "?"), "size": f"{vcpus:03d}"}
        for axis, key in keys.items():
            g = groups[axis].setdefault(key, {"nodes": 0, "vcpus": 0, "memoryGiB": 0.0, "dollarsPerHour": 0.0})
            g["nodes"] += 1
            g["vcpus"] += vcpus
            g["memoryGiB"] += mem
            g["dollarsPerHour"] += price
    return {axis: {key: {"nodes": g["nodes"], "vcpus": g["vcpus"],
                         "allocatableGiBPerVcpu": round(g["memoryGiB"] / g["vcpus"], 3),
                         "dollarsPerHour": round(g["dollarsPerHour"], 4),
                         "dollarsPerVcpuHour": round(g["dollarsPerHour"] / g["vcpus"], 5)}
                   for key, g in sorted(by.items())} for axis, by in groups.items()}


def run_one(name: str, n: int, existing: int, binary: Path | None, *, repeats: int, timeout: float,
            skip_karpenter: str | None = None, deadline: float = math.inf, solve_bound: float = 0.0,
            max_rounds: int = MAX_ROUNDS) -> dict[str, Any]:
    """One workload at one size. The two planners run alternately, ours then Karpenter's, ``repeats`` times,
    so that the machine's load falls on both alike; each solve time is the median of its runs. With a solve
    bound, the last of Karpenter's runs is its first round and its later rounds follow (``max_rounds``; 1: the
    first round only). Past ``deadline`` (time.monotonic()) the entry is not run; Karpenter's runs stop there
    at the latest."""
    left = deadline - time.monotonic()
    if left <= 0:
        return not_run(name, n, existing, "the run's budget was spent before it started")
    timeout = min(timeout, left)
    snap = snapshot(name, n, existing=existing)
    check = FitCheck(snap)
    entry: dict[str, Any] = {"name": name, "pods": n, "existingNodes": existing}
    parsed = parse_snapshot(snap)
    times: list[float] = []
    cpus: list[float] = []
    runs: list[dict[str, Any]] = []
    result: Plan | None = None
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "snapshot.json"
        if binary is not None and skip_karpenter is None:
            path.write_text(json.dumps(snap))
        for _ in range(repeats):
            result, wall, cpu = _ours(parsed)
            times.append(wall)
            cpus.append(cpu)
            if binary is None or skip_karpenter is not None:
                continue
            k = run_karpenter(binary, path, timeout, solve_bound)
            if k is None:
                skip_karpenter = f"did not finish within {timeout:.0f} s (wall clock)"
                break
            runs.append(k)
        later: dict[str, Any] | None = None
        if binary is not None and runs and solve_bound > 0 and max_rounds > 1 and runs[-1].get("deferredPods"):
            later = run_karpenter_rounds(binary, snap, runs[-1], path, solve_bound=solve_bound,
                                         timeout=max(0.0, min(timeout, deadline - time.monotonic())),
                                         max_rounds=max_rounds)
    assert result is not None
    nodes = our_nodes(result, snap)
    fit = check.check(nodes, existing_assignments(result.existing))
    prices = [x["price"] for x in nodes]
    ours = {"costPerHour": round(sum(prices), 4), "nodes": len(nodes),
            "unplaced": len(result.unschedulable), "solveSeconds": round(statistics.median(times), 4),
            "solveCpuSeconds": round(statistics.median(cpus), 4),
            "fits": fit.ok, "violations": fit.violations[:3], "violationCount": len(fit.violations),
            "packing": _packing(check, nodes, prices)}
    entry["ours"] = ours
    if binary is None or skip_karpenter is not None:
        entry["karpenter"] = None
        entry["karpenterNotRun"] = skip_karpenter or "peer unavailable"
        return entry
    k = runs[-1]
    karpenter_solve = statistics.median(r["solveSeconds"] for r in runs)
    karpenter_cpu = statistics.median(r.get("solveCpuSeconds", math.nan) for r in runs)
    first_round = {"costPerHour": round(k["totalPerHour"], 4), "nodes": len(k["nodeClaims"]),
                   "solveSeconds": round(karpenter_solve, 4), "solveCpuSeconds": round(karpenter_cpu, 4),
                   "deferred": k.get("deferredPods", 0)}
    if later is not None:
        # Every round's NodeClaims, as Karpenter launches them over its rounds; the solve time is the sum of the
        # rounds' (the first one's median).
        k = {**k, "nodeClaims": later["nodeClaims"], "existingNodePods": later["existingNodePods"],
             "unschedulable": later["unschedulable"], "deferredPods": later["deferredPods"],
             "totalPerHour": sum(c["pricePerHour"] for c in later["nodeClaims"] if c["instanceType"])}
        karpenter_solve += sum(r["solveSeconds"] for r in later["rounds"][1:])
        karpenter_cpu += sum(r["solveCpuSeconds"] or 0.0 for r in later["rounds"][1:])
    launched = [c for c in k["nodeClaims"] if c["instanceType"]]
    kfit = check.check(launched, k["existingNodePods"])
    unpriced = len(k["nodeClaims"]) - len(launched)
    # The launch model must keep to the zones the scheduler left each NodeClaim.
    outside = [c for c in launched if c["zone"] not in c["allowedZones"]]
    assert not outside, f"launch model put a NodeClaim outside its allowed zones: {outside[0]}"
    kk = {"costPerHour": round(k["totalPerHour"], 4), "nodes": len(k["nodeClaims"]),
          "unplaced": len(k["unschedulable"]),
          "solveSeconds": round(karpenter_solve, 4), "solveCpuSeconds": round(karpenter_cpu, 4),
          "instanceTypes": k["instanceTypes"],
          "fits": kfit.ok and not unpriced, "violations": kfit.violations[:3], "violationCount": len(kfit.violations),
          "nodeClaimsWithoutOffering": unpriced,
          "packing": _packing(check, launched, [c["pricePerHour"] for c in launched]),
          "solveBoundSeconds": k.get("solveTimeoutSeconds", 0.0) or None, "timedOut": k.get("timedOut", False),
          "deferred": k.get("deferredPods", 0),
          "rounds": len(later["rounds"]) if later else 1, "firstRound": first_round,
          "laterRounds": later["rounds"][1:] if later else [], "roundsStopped": later["stopped"] if later else None}
    entry["karpenter"] = kk
    # Pods still deferred when Karpenter's rounds stopped (or after its first round with --karpenter-rounds 1):
    # its $/h then covers fewer pods than ours, so the cost ratio is not given. Its later rounds would only add
    # NodeClaims, so ours over the $/h it had reached bounds the ratio from above; the cost target is judged met
    # when that bound meets it, and not judged otherwise.
    comparable = kk["deferred"] == 0
    entry["costRatio"] = round(ours["costPerHour"] / kk["costPerHour"], 4) if kk["costPerHour"] and comparable else None
    entry["costRatioAtMost"] = (_ceil4(ours["costPerHour"] / kk["costPerHour"])
                                if kk["costPerHour"] and not comparable else None)
    entry["solveRatio"] = round(ours["solveSeconds"] / kk["solveSeconds"], 4) if kk["solveSeconds"] else None
    entry["solveCpuRatio"] = (round(ours["solveCpuSeconds"] / kk["solveCpuSeconds"], 4)
                              if kk["solveCpuSeconds"] else None)
    entry["unplacedOurs"] = ours["unplaced"]
    entry["unplacedKarpenter"] = kk["unplaced"]
    entry["deferredKarpenter"] = kk["deferred"]
    entry["fitsOurs"] = ours["fits"]
    entry["fitsKarpenter"] = kk["fits"]
    target = KARPENTER_MIX_TARGET if name == "karpenter-mix" else TARGET
    met = ours["costPerHour"] <= target * kk["costPerHour"] + 1e-9
    # With pods deferred, the cost target is judged only when the bound meets it (ours within the target of what
    # Karpenter had launched already); otherwise None, not judged: its later rounds might still meet it.
    judged_by = "ratio" if comparable else ("bound" if met and kk["costPerHour"] else None)
    entry["targets"] = {
        "cost": met if judged_by else None,  # holds when both launch nothing
        "costJudgedBy": judged_by,
        "costTarget": target,
        "unplaced": ours["unplaced"] <= kk["unplaced"],
        "solve": ours["solveSeconds"] <= kk["solveSeconds"],
    }
    return entry


def _ceil4(x: float) -> float:
    """``x`` rounded up to 4 decimals, so that a rounded upper bound is still one."""
    return math.ceil(x * 10_000 - 1e-9) / 10_000


def table(entries: list[dict[str, Any]]) -> str:
    head = (f"{'workload':<22}{'pods':>7}{'exist':>6}{'ours $/h':>10}{'karp $/h':>10}{'cost x':>8}"
            f"{'ours s':>8}{'karp s':>8}{'solve x':>8}{'cpu x':>7}{'unpl o/k':>10}{'defer k':>8}{'rounds':>7}"
            f"{'fit o/k':>9}  missed")
    lines = [head, "-" * len(head)]
    for e in entries:
        where = f"{e['name']:<22}{e['pods']:>7}{e['existingNodes']:>6}"
        if e.get("ours") is None:
            lines.append(f"{where}   (not run: {e['notRun']})")
            continue
        o, k = e["ours"], e.get("karpenter")
        if k is None:
            lines.append(f"{where}{o['costPerHour']:>10.2f}{'-':>10}{'-':>8}{o['solveSeconds']:>8.2f}"
                         f"   (Karpenter not run: {e['karpenterNotRun']}; ours unplaced {o['unplaced']}, "
                         f"fit {'y' if o['fits'] else 'N'})")
            continue
        t = e["targets"]
        missed = ",".join(x for x in ("cost", "solve", "unplaced") if t[x] is False) or "-"
        if t["cost"] is None:
            missed += " (cost not comparable: Karpenter's rounds left pods deferred)"
        elif t["costJudgedBy"] == "bound":
            missed += " (cost met by its bound: Karpenter's rounds left pods deferred)"
        def ratio(value: float | None, width: int, digits: int) -> str:
            return f"{value:>{width}.{digits}f}" if value is not None else f"{'-':>{width}}"

        bound = e["costRatioAtMost"]
        cost = f"{'<=' + format(bound, '.3f'):>8}" if bound is not None else ratio(e["costRatio"], 8, 3)
        lines.append(
            f"{where}{o['costPerHour']:>10.2f}{k['costPerHour']:>10.2f}{cost}"
            f"{o['solveSeconds']:>8.2f}{k['solveSeconds']:>8.2f}{ratio(e['solveRatio'], 8, 3)}"
            f"{ratio(e.get('solveCpuRatio'), 7, 2)}"
            f"{str(e['unplacedOurs']) + '/' + str(e['unplacedKarpenter']):>10}{k.get('deferred', 0):>8}"
            f"{k.get('rounds', 1):>7}"
            f"{('y' if e['fitsOurs'] else 'N') + '/' + ('y' if e['fitsKarpenter'] else 'N'):>9}  {missed}")
    return "\n".join(lines)


def not_run(name: str, n: int, existing: int, why: str) -> dict[str, Any]:
    return {"name": name, "pods": n, "existingNodes": existing, "ours": None, "karpenter": None, "notRun": why,
            "costRatio": None, "solveRatio": None, "unplacedOurs": None, "unplacedKarpenter": None}


def document(entries: list[dict[str, Any]], versions: dict[str, str], blocked: str | None,
             settings: dict[str, Any]) -> dict[str, Any]:
    load = os.getloadavg()
    return {
        "benchmark": "peers",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                    "loadAverage": [round(x, 2) for x in load]},
        "versions": versions,
        "peerBlocked": blocked,
        "settings": settings,
        "assumptions": [
            "same snapshot for both: docs/snapshot.md format, moto's us-east-1 catalogue, real on-demand prices, "
            "synthesised spot prices (benchmarks/_catalog.py)",
            "Karpenter: its provisioning scheduler (NewTopology, NewScheduler, Solve, TruncateInstanceTypes) with the "
            "fake cloud provider and the AWS provider's NewInstanceType (AL2023, VM memory overhead 7.5%), "
            "NumConcurrentReconciles 5 as its scheduling benchmark",
            "each side's node priced at the cheapest offering its launch allows (Karpenter: among the NodeClaim's "
            "requirements, zone included); existing nodes cost nothing",
            "the two planners run alternately within an entry (ours, then Karpenter's, per repeat) on the same "
            "machine, each timed around the planner alone; solve seconds are wall-clock medians, solveCpuSeconds "
            "the process CPU time over the same span (Karpenter's over all its threads)",
            "Karpenter's Solve is bounded as its provisioner bounds it in production "
            "(settings.karpenterSolveBoundSeconds, one minute in sigs.k8s.io/karpenter's provisioner.go; 0: "
            "unbounded); the pods it had not reached by then stay pending for its next round: its provisioner's "
            "later rounds (up to settings.karpenterRounds) each schedule the pods still pending, seeing the "
            "earlier rounds' NodeClaims as nodes of their NodePool with the allocatable Karpenter expects of the "
            "launched type and the pods placed there bound (as if they had registered and kube-scheduler had "
            "bound them before the next round); karpenter.costPerHour covers every round's NodeClaims, "
            "karpenter.solveSeconds the first round's median plus the later rounds' (karpenter.firstRound and "
            "karpenter.laterRounds per round); pods still deferred when the rounds stop (karpenter.deferred) "
            "leave costRatio not given for that entry; costRatioAtMost then gives ours / the $/h of the NodeClaims its "
            "rounds had launched, an upper bound on the ratio since later rounds only add NodeClaims (the cost "
            "target counts as met, targets.costJudgedBy 'bound', when this bound meets it, and is not judged "
            "otherwise). The solve bound is wall clock: on a loaded machine each round reaches fewer pods",
            "costRatio = ours / Karpenter $/h; solveRatio = ours / Karpenter median solve seconds; solveCpuRatio "
            "the same on CPU seconds",
            "Karpenter's run is stopped after settings.karpenterTimeoutSeconds; a workload whose Karpenter run did "
            "not finish is not given to Karpenter at larger sizes (its time grows faster than the pod count)",
            "fit: benchmarks/_fit.py, independent of autoscaler.*, judges both sides the same way",
            f"targets: cost <= {KARPENTER_MIX_TARGET} on karpenter-mix and <= {TARGET} elsewhere, never more "
            "unplaced, solve ratio <= 1",
        ],
        "workloads": entries,
    }


def repro_zone_affinity(binary: Path, runs: int) -> dict[str, Any]:
    """Karpenter's scheduler on ``zone_affinity_pair`` ``runs`` times: the zones each NodeClaim allows, and how
    often the two allow no common zone (then no launch can put the pair in one zone)."""
    doc = zone_affinity_pair()
    check = FitCheck(doc)
    seen = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "snapshot.json"
        path.write_text(json.dumps(doc))
        for _ in range(runs):
            out = run_karpenter(binary, path, 600)
            assert out is not None
            zones = [c["allowedZones"] for c in out["nodeClaims"]]
            fit = check.check([c for c in out["nodeClaims"] if c["instanceType"]], out["existingNodePods"])
            seen.append({"allowedZones": zones, "disjoint": len(zones) == 2 and not set(zones[0]) & set(zones[1]),
                         "fits": fit.ok, "violations": fit.violations})
    return {"input": "two pods, zone self-affinity and hostname self-anti-affinity (zone_affinity_pair)",
            "runs": runs, "disjoint": sum(1 for r in seen if r["disjoint"]),
            "fitFailures": sum(1 for r in seen if not r["fits"]), "results": seen}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.peers", description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)),
                        help="comma-separated pod counts, or 'all' for 1000,5000,20000,50000 (default: 1000)")
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated workload names")
    parser.add_argument("--repeats", type=int, default=1, help="runs per size up to 5,000 pods (one above)")
    parser.add_argument("--karpenter-timeout", type=float, default=3600.0,
                        help="seconds (wall) after which a Karpenter run is stopped and recorded as not finished")
    parser.add_argument("--karpenter-solve-bound", type=float, default=KARPENTER_SOLVE_BOUND,
                        help="seconds (wall) Karpenter's Solve may run, as its provisioner's one-minute bound "
                             "(default 60; 0: unbounded)")
    parser.add_argument("--karpenter-rounds", type=int, default=MAX_ROUNDS,
                        help="with a solve bound: the provisioner rounds Karpenter gets to place the pods its "
                             "first round deferred, each seeing the earlier rounds' NodeClaims "
                             f"(default {MAX_ROUNDS}; 1: its first round only)")
    parser.add_argument("--budget", type=float, default=0.0,
                        help="seconds for the whole run (0: none); entries not started by then are recorded "
                             "as not run")
    parser.add_argument("--jobs", type=int, default=1,
                        help="entries run at once (each still runs its two planners alternately)")
    parser.add_argument("--out", type=Path, help="also write the JSON document here, after every entry")
    parser.add_argument("--repro-zone-affinity", type=int, metavar="RUNS", default=0,
                        help="only run Karpenter RUNS times on the two-pod input that splits a zone affinity group")
    args = parser.parse_args(argv)
    if args.repro_zone_affinity:
        print(json.dumps(repro_zone_affinity(peer_binary(), args.repro_zone_affinity)))
        return
    sizes = list(ALL_SIZES) if args.sizes == "all" else [int(s) for s in args.sizes.split(",") if s]
    names = [w for w in args.workloads.split(",") if w]
    unknown = [w for w in names if w not in WORKLOADS]
    if unknown:
        parser.error(f"unknown workload(s) {unknown}; choose from {', '.join(WORKLOADS)}")
    started = time.monotonic()
    blocked = None
    binary: Path | None = None
    try:
        binary = peer_binary()
    except PeerUnavailable as exc:
        blocked = str(exc)
        print(blocked, file=sys.stderr)
    versions = {}
    for line in (PEER / "go.mod").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] in ("sigs.k8s.io/karpenter", "github.com/aws/karpenter-provider-aws"):
            versions[parts[0]] = parts[1]
    settings = {"sizes": sizes, "repeats": args.repeats, "karpenterTimeoutSeconds": args.karpenter_timeout,
                "jobs": args.jobs, "karpenterSolveBoundSeconds": args.karpenter_solve_bound,
                "karpenterRounds": args.karpenter_rounds,
                "budgetSeconds": args.budget or None}
    deadline = started + args.budget if args.budget else math.inf
    entries: list[dict[str, Any]] = []
    unfinished: dict[tuple[str, bool], int] = {}  # (workload, with existing nodes) -> size Karpenter did not finish
    karpenter_seconds: dict[str, float] = {}  # workload -> Karpenter's solve seconds at the last size
    with concurrent.futures.ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for n in sorted(sizes):
            # Within a size, the workloads Karpenter solved fastest at the previous size go first, so that a
            # budget leaves out the slowest.
            jobs = []
            for name in sorted(names, key=lambda w: karpenter_seconds.get(w, 0.0)):
                for existing in (0, max(3, n // 100)):
                    first = unfinished.get((name, existing > 0))
                    skip = None if first is None else (f"its run at {first:,} pods did not finish within "
                                                       f"{args.karpenter_timeout:.0f} s")
                    jobs.append(pool.submit(run_one, name, n, existing, binary,
                                            repeats=args.repeats if n <= 5000 else 1,
                                            timeout=args.karpenter_timeout, skip_karpenter=skip, deadline=deadline,
                                            solve_bound=args.karpenter_solve_bound,
                                            max_rounds=args.karpenter_rounds))
            for job in jobs:
                entry = job.result()
                if str(entry.get("karpenterNotRun", "")).startswith("did not finish"):
                    unfinished[(entry["name"], entry["existingNodes"] > 0)] = n
                if entry.get("karpenter"):
                    karpenter_seconds[entry["name"]] = max(karpenter_seconds.get(entry["name"], 0.0),
                                                           entry["karpenter"]["solveSeconds"])
                entries.append(entry)
                print(table(entries[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
                if args.out:
                    args.out.write_text(json.dumps(document(entries, versions, blocked, settings), indent=1) + "\n")
    print(table(entries), file=sys.stderr)
    print(json.dumps(document(entries, versions, blocked, settings)))


if __name__ == "__main__":
    main()
