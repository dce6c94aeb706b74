"""Pure rules the planner applies: the price/size frontier, minValues, the small LP that sizes a group's
nodes and its duals, balanced filling, topology-spread water-filling, requirement matching, and the
wording of unschedulable reasons."""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from dataclasses import replace

from autoscaler.domain import resources as res
from autoscaler.domain.allocatable import GI
from autoscaler.domain.keys import ZONE_KEYS, ZONE_LABEL
from autoscaler.domain.models import (
    Node,
    Pod,
    PodAffinityTerm,
    Requirement,
    Taint,
    Toleration,
)
from autoscaler.domain.nodepool import requirement_allows
from autoscaler.domain.plan import PlanInput
from autoscaler.domain.scheduling.model import _INF, MAX_INSTANCE_TYPES, Vec, _Class, _fit, _le, _sizing_price, _Type


def _frontier(priced: list[tuple[float, _Type]]) -> list[tuple[float, _Type]]:
    """The priced types no other type beats (at most as dear while holding at least as much of every
    resource), cheapest first."""
    cheapest: dict[Vec, tuple[float, _Type]] = {}  # many families share a size; keep the cheapest
    for p, x in priced:
        seen = cheapest.get(x.alloc)
        if p < _INF and (seen is None or (p, x.name) < (seen[0], seen[1].name)):
            cheapest[x.alloc] = (p, x)
    out: list[tuple[float, _Type]] = []
    for p, x in sorted(cheapest.values(), key=lambda e: (e[0], e[1].name)):
        if not any(_le(x.alloc, y.alloc) for _, y in out):  # every earlier one is at most as dear
            out.append((p, x))
    return out


def _with_min_values(types: list[_Type], reqs: Iterable[Requirement]) -> list[_Type] | None:
    """The cheapest ``MAX_INSTANCE_TYPES`` types, extended (then trimmed) so that every requirement's
    ``minValues`` is met by distinct label values; None when the fitting types cannot meet it."""
    chosen = types[:MAX_INSTANCE_TYPES]
    for r in reqs:
        if not r.min_values:
            continue
        values = {x.labels.get(r.key) for x in chosen}
        if len(values) >= r.min_values:
            continue
        for x in types[MAX_INSTANCE_TYPES:]:
            v = x.labels.get(r.key)
            if v not in values:
                chosen = [*chosen[:-1], x] if len(chosen) >= MAX_INSTANCE_TYPES else [*chosen, x]
                values = {y.labels.get(r.key) for y in chosen}
                if len(values) >= r.min_values:
                    break
        if len(values) < r.min_values:
            return None
    return chosen


def _mix(types: list[_Type], items: list[tuple[_Class, int]], demand: list[int], *, zones: frozenset[str],
         cts: frozenset[str], keys: list[str]) -> tuple[_Type | None, float, _Type | None, float]:
    """The cheapest fractional cover of ``demand`` by one type or a pair of types (the LP over CPU,
    memory and pods, restricted to two types, which is where its optimum lies for two binding
    resources): (type a, nodes of a, type b or None, nodes of b)."""
    biggest = tuple(max(c.req[i] for c, _ in items) for i in range(len(keys)))
    fitting = [x for x in types if _le(biggest, x.alloc)] or types
    priced = [(x, p) for x in fitting if (p := _sizing_price(x, zones, cts)) < _INF]
    if not priced:
        return None, 0.0, None, 0.0
    dims = [i for i, d in enumerate(demand) if d > 0]

    def single(x: _Type) -> float:
        return max((demand[i] / x.alloc[i] if x.alloc[i] > 0 else _INF) for i in dims)

    best_single = min(priced, key=lambda e: e[1] * single(e[0]))
    best_cost = best_single[1] * single(best_single[0])
    best: tuple[_Type, float, _Type | None, float] = (best_single[0], single(best_single[0]), None, 0.0)
    cand: dict[str, tuple[_Type, float]] = {}
    for i in dims:
        for x, p in sorted(priced, key=lambda e: e[1] / e[0].alloc[i] if e[0].alloc[i] else _INF)[:6]:
            cand[x.name] = (x, p)
    for x, p in sorted(priced, key=lambda e: e[1] * single(e[0]))[:8]:  # balanced types pair well too
        cand[x.name] = (x, p)
    pool = list(cand.values())
    for ai, (a, pa) in enumerate(pool):
        for b, pb in pool[ai + 1:]:
            for ii, i in enumerate(dims):
                for j in dims[ii + 1:]:
                    det = a.alloc[i] * b.alloc[j] - a.alloc[j] * b.alloc[i]
                    if det == 0:
                        continue
                    xa = (demand[i] * b.alloc[j] - demand[j] * b.alloc[i]) / det
                    xb = (a.alloc[i] * demand[j] - a.alloc[j] * demand[i]) / det
                    if xa < 0 or xb < 0:
                        continue
                    if any(a.alloc[k] * xa + b.alloc[k] * xb < demand[k] * (1 - 1e-9) for k in dims):
                        continue
                    cost = pa * xa + pb * xb
                    if cost < best_cost * 0.995:
                        best_cost, best = cost, (a, xa, b, xb)
    return best


def _duals(types: list[_Type], items: list[tuple[_Class, int]], demand: list[int], *, zones: frozenset[str],
           cts: frozenset[str], keys: list[str]) -> tuple[float, ...]:
    """Shadow prices per unit of each resource of the cheapest fractional cover of ``demand`` (the
    dual of ``_mix``'s LP): what one more unit costs when packed in bulk. Zero where not binding."""
    if not types or not any(demand):
        return (0.0,) * len(keys)
    a, _, b, _ = _mix(types, items, demand, zones=zones, cts=cts, keys=keys)
    return _mix_duals(a, b, demand, zones=zones, cts=cts, keys=keys)


def _mix_duals(a: _Type | None, b: _Type | None, demand: list[int], *, zones: frozenset[str], cts: frozenset[str],
               keys: list[str]) -> tuple[float, ...]:
    """``_duals`` for the types ``_mix`` chose for ``demand``."""
    y = [0.0] * len(keys)
    if a is None:
        return tuple(y)
    pa = _sizing_price(a, zones, cts)
    dims = [i for i, d in enumerate(demand) if d > 0]
    if b is None:
        i = max(dims, key=lambda k: demand[k] / a.alloc[k] if a.alloc[k] > 0 else _INF)
        if a.alloc[i] > 0:
            y[i] = pa / a.alloc[i]
        return tuple(y)
    pb = _sizing_price(b, zones, cts)
    best = -1.0
    for ii, i in enumerate(dims):
        for j in dims[ii + 1:]:
            det = a.alloc[i] * b.alloc[j] - a.alloc[j] * b.alloc[i]
            if det == 0:
                continue
            yi = (pa * b.alloc[j] - pb * a.alloc[j]) / det
            yj = (a.alloc[i] * pb - b.alloc[i] * pa) / det
            value = yi * demand[i] + yj * demand[j]
            if yi >= 0 and yj >= 0 and value > best:
                best, y = value, [0.0] * len(keys)
                y[i], y[j] = yi, yj
    return tuple(y)


def _fill_balanced(ty: _Type, items: list[tuple[_Class, int]], *, cpu: int,
                   mem: int) -> tuple[dict[int, int], Vec]:
    """Fill one node of ``ty`` from ``items``, taking from the CPU-heavy end when memory is the fuller
    dimension and from the memory-heavy end otherwise, in chunks, until nothing more fits."""
    ac, am = max(ty.alloc[cpu], 1), max(ty.alloc[mem], 1)
    order = sorted((c for c, n in items), key=lambda c: ((c.req[mem] / am) / max(c.req[cpu] / ac, 1e-12), c.id))
    left = {c.id: n for c, n in items}
    free = list(ty.alloc)
    put: dict[int, int] = {}
    lo, hi = 0, len(order) - 1
    while lo <= hi:
        cpu_full = 1 - free[cpu] / ac
        mem_full = 1 - free[mem] / am
        c = order[lo] if cpu_full <= mem_full else order[hi]
        k = min(left[c.id], _fit(free, c.req))
        if k <= 0:
            if c is order[lo]:
                lo += 1
            else:
                hi -= 1
            continue
        k = min(k, max(1, _fit(ty.alloc, c.req) // 16))
        put[c.id] = put.get(c.id, 0) + k
        left[c.id] -= k
        free = [f - r * k for f, r in zip(free, c.req, strict=True)]
        if left[c.id] == 0:
            if c is order[lo]:
                lo += 1
            else:
                hi -= 1
    return put, tuple(a - f for a, f in zip(ty.alloc, free, strict=True))


def _spread(allowed: set[str], every: set[str], counts: Mapping[str, int], n: int, *, max_skew: int,
            min_zero: bool, room: Mapping[str, int] | None = None) -> tuple[dict[str, int], int]:
    """Place up to ``n`` pods in ``allowed`` domains, always into the one with the fewest matching pods,
    while kube's skew rule admits it: count + 1 - global minimum (over ``every`` domain; 0 when
    ``min_zero``) <= maxSkew. A domain in ``room`` takes at most that many (existing nodes only, no
    NodePool launches there). Returns the counts per domain and how many could not be placed."""
    room = room or {}
    have = {d: counts.get(d, 0) for d in every | allowed}
    out: dict[str, int] = {}
    others = [have[d] for d in have if d not in allowed]
    floor_others = min(others) if others else _INF
    open_ = set(allowed)
    while n > 0:
        open_ = {x for x in open_ if x not in room or out.get(x, 0) < room[x]}
        if not open_:
            break
        d = min(open_, key=lambda x: (have[x], x))
        if not min_zero and not others and not room and n >= len(allowed) and all(
                have[x] == have[d] for x in allowed):
            q = n // len(allowed)  # level: a whole round each at once (skew stays 0 among them)
            for x in allowed:
                have[x] += q
                out[x] = out.get(x, 0) + q
            n -= q * len(allowed)
            continue
        low = 0 if min_zero else min(floor_others, *(have[x] for x in allowed))
        room_skew = low + max_skew - have[d]
        if room_skew <= 0:
            break
        nxt = min((have[x] for x in open_ if x != d), default=have[d] + n)
        k = int(min(n, room_skew, max(1, nxt - have[d]), room[d] - out.get(d, 0) if d in room else n))
        have[d] += k
        out[d] = out.get(d, 0) + k
        n -= k
    return out, n


def _water_fill(domains: set[str], counts: Mapping[str, int], n: int,
                room: Mapping[str, int] | None = None) -> dict[str, int]:
    """Place up to ``n`` pods one at a time in the domain with the fewest matching pods (kube's skew
    rule always admits that domain), a domain in ``room`` taking at most that many; counts per domain."""
    room = room or {}
    heap = [(counts.get(d, 0), d) for d in sorted(domains) if room.get(d, 1) > 0]
    heapq.heapify(heap)
    out = dict.fromkeys(domains, 0)
    while n > 0 and heap:
        have, d = heapq.heappop(heap)
        nxt = heap[0][0] if heap else have + n
        k = min(n, max(1, nxt - have), room[d] - out[d] if d in room else n)
        out[d] += k
        n -= k
        if d not in room or out[d] < room[d]:
            heapq.heappush(heap, (have + k, d))
    return out




def _label_ok(r: Requirement, labels: Mapping[str, str]) -> bool:
    if r.key in ZONE_KEYS:
        return requirement_allows(r, labels.get(ZONE_LABEL, labels.get(r.key)))
    return requirement_allows(r, labels.get(r.key))


def _intersect(pod: Requirement, pool_reqs: list[Requirement]) -> str | bool:
    """Whether a pod requirement on a NodePool-defined key can hold; the label value a new node gets
    when one is decided (str), True when compatible without a single value, False when impossible."""
    allowed: set[str] | None = None
    denied: set[str] = set()
    must_exist = False
    for r in pool_reqs:
        if r.operator == "In":
            allowed = set(r.values) if allowed is None else allowed & set(r.values)
            must_exist = True
        elif r.operator == "NotIn":
            denied |= set(r.values)
        elif r.operator == "Exists":
            must_exist = True
        elif r.operator == "DoesNotExist":
            return pod.operator in ("NotIn", "DoesNotExist")
    if pod.operator == "In":
        values = set(pod.values) - denied
        if allowed is not None:
            values &= allowed
        return min(values) if values else False
    if pod.operator == "NotIn":
        if allowed is not None:
            left = allowed - set(pod.values)
            return min(left) if left else False
        return True
    if pod.operator == "DoesNotExist":
        return not must_exist
    if pod.operator == "Exists":
        return min(allowed) if allowed else True
    if allowed is not None:
        ok = sorted(v for v in allowed if requirement_allows(pod, v))
        return ok[0] if ok else False
    return False


def _prefer_no_schedule(tolerations: tuple[Toleration, ...], taints: tuple[Taint, ...]) -> list[Taint]:
    """The PreferNoSchedule taints no toleration covers (kube-scheduler avoids such nodes when it can)."""
    return [t for t in taints if t.effect == "PreferNoSchedule" and not any(tol.tolerates(t) for tol in tolerations)]


def _single_values(reqs: Iterable[Requirement]) -> dict[str, str]:
    return {r.key: r.values[0] for r in reqs if r.operator == "In" and len(r.values) == 1}


def _live_taints(n: Node) -> tuple[Taint, ...]:
    return n.taints


def _describe(r: Requirement) -> str:
    if r.operator in ("Exists", "DoesNotExist"):
        return f"{r.key} {r.operator}"
    return f"{r.key} {r.operator} [{', '.join(r.values)}]"


def _fmt(r: Mapping[str, int]) -> str:
    parts = []
    for k, v in sorted(r.items()):
        if k == res.PODS:
            continue
        if k == res.CPU:
            parts.append(f"cpu={v}m")
        elif k in (res.MEMORY, res.EPHEMERAL_STORAGE):
            parts.append(f"{k}={v / GI:.2f}Gi")
        else:
            parts.append(f"{k}={v}")
    return ", ".join(parts)


def _preferred_terms(p: Pod) -> list[tuple[str, PodAffinityTerm]]:
    """A pending pod's preferred pod (anti-)affinity terms in the order they are given up: affinity
    before anti-affinity (Karpenter's order), the lowest weight first within each."""
    aff = [("affinity", t) for _, t in sorted(p.preferred_pod_affinity, key=lambda wt: wt[0])]
    anti = [("anti", t) for _, t in sorted(p.preferred_pod_anti_affinity, key=lambda wt: wt[0])]
    return aff + anti


def _preferences_as_required(snapshot: PlanInput, terms: Mapping[str, list[tuple[str, PodAffinityTerm]]],
                             relaxed: Mapping[str, int]) -> PlanInput:
    """The snapshot with the preferred pod (anti-)affinity ``terms`` of each pending pod taken as
    required, less the first ``relaxed[pod]`` it has given up; the snapshot itself when there are none."""
    if not terms:
        return snapshot
    pods = []
    for p in snapshot.pods:
        if p.is_pending and p.key in terms:
            kept = terms[p.key][relaxed.get(p.key, 0):]
            pods.append(replace(
                p, preferred_pod_affinity=(), preferred_pod_anti_affinity=(),
                pod_affinity=p.pod_affinity + tuple(t for kind, t in kept if kind == "affinity"),
                pod_anti_affinity=p.pod_anti_affinity + tuple(t for kind, t in kept if kind == "anti")))
        else:
            pods.append(p)
    return replace(snapshot, pods=pods)

