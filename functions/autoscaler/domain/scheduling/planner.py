"""The plan: run placement, pack what was deferred per (NodePool, requirements, zones, capacity
types) group, and turn the opened nodes into launches; ``plan`` relaxes preferred pod (anti-)affinity
for pods a plan cannot place."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Collection
from dataclasses import replace

from autoscaler.domain import resources as res
from autoscaler.domain.keys import CAPACITY_TYPE_LABEL, HOSTNAME_LABEL, NODEPOOL_LABEL, ZONE_LABEL
from autoscaler.domain.plan import Launch, Plan, PlanInput, Unschedulable
from autoscaler.domain.scheduling.model import (
    _INF,
    MAX_INSTANCE_TYPES,
    RESIDUAL_TIE,
    Vec,
    _Chunk,
    _Class,
    _fit,
    _le,
    _Node,
    _price,
    _sizing_price,
    _sub,
    _Target,
    _Type,
)
from autoscaler.domain.scheduling.placement import _Placement
from autoscaler.domain.scheduling.prepared import Prepared
from autoscaler.domain.scheduling.rules import (
    _fill_balanced,
    _frontier,
    _mix,
    _mix_duals,
    _preferences_as_required,
    _preferred_terms,
    _single_values,
    _with_min_values,
)


class _Scheduler(_Placement):
    """One plan over one ``PlanInput``."""

    def run(self) -> Plan:
        order = sorted(self.classes, key=lambda c: (
            0 if any(t.topology_key == HOSTNAME_LABEL for t in c.rep.pod_affinity) else
            1 if c.shapes_nodes else 2 if c.rep.pod_affinity else 3,
            tuple(-x for x in c.req)))
        # Resolve every class before placing any: node sizing for shaped classes (``_share``) needs
        # the whole pending demand of each NodePool, not just the classes placed so far.
        for c in order:
            if c.error is None:
                c.error = self._resolve(c)
        self._place_launched_for()
        # Pod (anti-)affinity targets come before the classes that follow or avoid them.
        queue = deque(self._affinity_order(order))
        self.requeue = []
        flexible: list[_Chunk] = []  # pods of unshaped classes still to place
        i = 0
        while queue:
            self._split_all(queue)  # spread/affinity on keys other than zone, capacity type, hostname
            if not queue:
                break
            c = queue.popleft()
            i += 1
            if i % 8 == 0 and queue:  # drop nodes no remaining class could use, so scans stay short
                floor = tuple(min(d.req[j] for d in queue) for j in range(len(self.keys)))
                self.open = [n for n in self.open if _fit(n.free, floor) > 0]
            if c.error is not None:
                self._unschedulable(c, len(c.pods) - c.placed, c.error)
                continue
            shaped = c.shapes_nodes or c.id in self.host_targets or any(
                t.topology_key == HOSTNAME_LABEL for t in c.rep.pod_affinity)
            for zones, cts, count in self._chunks(c):
                if shaped:
                    self._place(c, zones, cts, count)
                else:
                    left = self._place_existing(c, zones, cts, count)
                    if left:
                        flexible.append(_Chunk(c, zones, cts, left))
            queue.extendleft(reversed(self.requeue))  # pods that gave up a preference are placed next
            self.requeue.clear()
        # Classes free to go anywhere fill the nodes opened for shaped ones together, node by node,
        # balancing CPU against memory; what is left is packed in bulk.
        self._fill_open(flexible)
        for ch in flexible:
            if ch.left:
                self._defer(ch.cls, ch.zones, ch.cts, ch.left)
        self._pack_deferred()
        self._finish()
        return self.plan

    def _pack_deferred(self) -> None:
        while self.deferred:
            key = min(self.deferred, key=lambda k: self.deferred[k][0].pool.index)
            t, zones, cts, items = self.deferred.pop(key)
            left = self._pack_group(t, zones, cts, [(c, n) for c, n in items])  # type: ignore[misc]
            for c, n in left:
                # Classes share a deferred group by target signature; each has its own target objects.
                idx = next((i for i, x in enumerate(c.targets) if x.sig == t.sig), len(c.targets))
                nxt = next((x for x in c.targets[idx + 1:] if x.zones & zones and x.cts & cts), None)
                if nxt is None:
                    why = f"NodePool {t.pool.pool.name} limit reached"
                    self._unschedulable_later(c, n, why)
                else:
                    full = nxt if nxt.base_types is None else replace(nxt, types=nxt.base_types, sizing=None)
                    e = self.deferred.setdefault((nxt.sig, zones & nxt.zones, cts & nxt.cts),
                                                 (full, zones & nxt.zones, cts & nxt.cts, []))
                    e[3].append([c, n])

    def _pack_group(self, t: _Target, zones: frozenset[str], cts: frozenset[str],
                    items: list[tuple[_Class, int]]) -> list[tuple[_Class, int]]:
        """Open nodes for ``items`` on target ``t``; returns what a NodePool limit left over.

        Node by node: solve the two-type LP on the demand still to place, open the type the LP uses
        most (or, for the last fraction of a node, ``_residual_node``'s choice), and fill it balancing
        CPU against memory so the node is full in both."""
        types = [x for x in t.types if _sizing_price(x, zones, cts) < _INF]
        sizing = self._min_values_sizing(t, types)
        if sizing is not None:
            types = sizing
        split = self._demanding(types, items, zones=zones, cts=cts)
        if split is not None:
            # Pods only the largest types hold get their nodes first; the rest top those up, and what is
            # left is packed on its own (small types stay allowed for it).
            big, rest = split
            left = self._pack_group(t, zones, cts, big)
            chunks = [_Chunk(c, zones, cts, n) for c, n in rest]
            self._fill_open(chunks)
            rest = [(ch.cls, ch.left) for ch in chunks if ch.left]
            return left + (self._pack_group(t, zones, cts, rest) if rest else [])
        # Only types that hold every class's pod are sized with (as the LP would each round anyway).
        biggest = tuple(max(c.req[i] for c, _ in items) for i in range(len(self.keys)))
        types = [x for x in types if _le(biggest, x.alloc)] or types
        rem = {c.id: n for c, n in items}
        cls = {c.id: c for c, _ in items}
        cpu, mem = self.keys.index(res.CPU), self.keys.index(res.MEMORY)
        while types and any(rem.values()):
            live = [(cls[cid], n) for cid, n in rem.items() if n > 0]
            demand = [0] * len(self.keys)
            for c, n in live:
                for i, r in enumerate(c.req):
                    demand[i] += r * n
            a, xa, b, xb = _mix(types, live, demand, zones=zones, cts=cts, keys=self.keys)
            if a is None:
                break
            if xa >= 1 or (b is not None and xb >= 1):
                ty = a if xa >= xb or b is None else b
                put, used = _fill_balanced(ty, live, cpu=cpu, mem=mem)
            else:
                duals = _mix_duals(a, b, demand, zones=zones, cts=cts, keys=self.keys)
                ty, put, used = self._residual_node(t, types, live, demand, duals, zones=zones, cts=cts)
            if not put:
                break  # the largest remaining class does not fit this type; handled below
            node = self._new_node(t, ty, zones, cts)
            if node is None:
                break
            node.used, node.free, node.classes = used, _sub(node.limit, used), put
            for cid, k in put.items():
                rem[cid] -= k
                cls[cid].placed += k
        # Anything the mix could not place (a class too big for the chosen type, or a limit) goes one
        # class at a time onto its own cheapest type, then is handed back.
        leftovers = []
        for cid, count in rem.items():
            c, n = cls[cid], count
            while n > 0:
                fits = [x for x in types if _fit(x.alloc, c.req) >= 1]
                if not fits:
                    break
                ty = min(fits, key=lambda x: _sizing_price(x, zones, cts) / min(_fit(x.alloc, c.req), n))
                k = min(n, _fit(ty.alloc, c.req))
                node = self._new_node(t, ty, zones, cts)
                if node is None:
                    break
                self._put(c, node, k)
                n -= k
            if n > 0:
                leftovers.append((c, n))
        return leftovers

    def _demanding(self, types: list[_Type], items: list[tuple[_Class, int]], *, zones: frozenset[str],
                   cts: frozenset[str]) -> tuple[list[tuple[_Class, int]], list[tuple[_Class, int]]] | None:
        """The classes that fit far fewer types than the others (an 8-GPU pod next to 1-GPU pods) and the
        rest, when packing them apart is clearly cheaper: the LP over all of them may only use types the
        most demanding class fits."""
        if len(items) < 2:
            return None
        if all(c.req == items[0][0].req for c, _ in items):
            return None
        fit = {c.id: sum(1 for x in types if _le(c.req, x.alloc)) for c, _ in items}
        low = min(fit.values())
        big = [(c, n) for c, n in items if fit[c.id] == low]
        rest = [(c, n) for c, n in items if fit[c.id] > low]
        if not rest or min(fit[c.id] for c, _ in rest) < 2 * max(low, 1):
            return None

        def cost(part: list[tuple[_Class, int]]) -> float:
            demand = [sum(c.req[i] * n for c, n in part) for i in range(len(self.keys))]
            a, xa, b, xb = _mix(types, part, demand, zones=zones, cts=cts, keys=self.keys)
            if a is None:
                return _INF
            return _sizing_price(a, zones, cts) * xa + (_sizing_price(b, zones, cts) * xb if b is not None else 0.0)

        return (big, rest) if cost(big) + cost(rest) < 0.97 * cost(items) else None

    def _residual_node(self, t: _Target, types: list[_Type], live: list[tuple[_Class, int]], demand: list[int],
                       duals: tuple[float, ...], *, zones: frozenset[str],
                       cts: frozenset[str]) -> tuple[_Type, dict[int, int], Vec]:
        """The node for a group's last fraction of a node: of the types that are not beaten on price and
        size, the one whose price per unit of pods it actually takes (valued at the group's shadow
        prices ``duals``) is lowest; the cheapest type that takes everything competes on the same terms,
        so one roomy node loses to a well-filled smaller one plus what remains."""
        cpu, mem = self.keys.index(res.CPU), self.keys.index(res.MEMORY)
        key = (id(t), zones, cts)
        cands = self.frontier_cache.get(key)
        if cands is None:
            cands = self.frontier_cache[key] = _frontier([(_sizing_price(x, zones, cts), x) for x in types])
        best: tuple[float, _Type, dict[int, int], Vec] | None = None
        for p, x in cands:
            put, used = _fill_balanced(x, live, cpu=cpu, mem=mem)
            if not put:
                continue
            value = sum(y * u for y, u in zip(duals, used, strict=True))
            ratio = p / value if value > 0 else _INF
            # Within RESIDUAL_TIE, the type that takes more wins: one node rather than two at the same price.
            holds_more = best is not None and _le(best[3], used) and best[3] != used
            if best is None or ratio < best[0] * (1 - RESIDUAL_TIE) or (
                    holds_more and ratio <= best[0] * (1 + RESIDUAL_TIE)):
                best = (ratio, x, put, used)
            if _le(demand, x.alloc):
                break  # larger types only cost more for the same pods
        if best is None:
            ty = types[0]
            return ty, *_fill_balanced(ty, live, cpu=cpu, mem=mem)
        return best[1], best[2], best[3]

    def _finish(self) -> None:
        for c, count, reason in self.late:
            self._unschedulable(c, count, reason)
        cursor = {c.id: 0 for c in self.classes}
        taken = {u.pod for u in self.plan.unschedulable}
        taken.update(k for n in self.existing for keys in n.pinned.values() for k in keys)
        avail = {c.id: [p for p in c.pods if p.key not in taken] for c in self.classes}

        def pods_for(node: _Node) -> list[str]:
            keys: list[str] = []
            for cid, k in node.classes.items():
                mine = node.pinned.get(cid, ())
                keys.extend(mine)
                i = cursor[cid]
                keys.extend(p.key for p in avail[cid][i:i + k - len(mine)])
                cursor[cid] = i + k - len(mine)
            return keys

        for ex in self.existing:
            for key in pods_for(ex):
                self.plan.existing[key] = ex.name
        cache: dict[tuple[object, ...], tuple[str, tuple[str, ...], tuple[str, ...], float] | str] = {}
        for n in self.new_nodes:
            keys = pods_for(n)
            if not keys:
                continue
            assert n.target is not None and n.type_ is not None
            launch = self._launch(n, cache)
            if isinstance(launch, str):
                for k in keys:
                    self.plan.unschedulable.append(Unschedulable(k, launch))
                continue
            ct, zones, types, price = launch
            t = n.target
            pool = t.pool.pool
            labels = {**_single_values(pool.requirements), **pool.labels, **t.labels, NODEPOOL_LABEL: pool.name,
                      CAPACITY_TYPE_LABEL: ct}
            if len(zones) == 1:
                labels[ZONE_LABEL] = zones[0]
            else:
                labels.pop(ZONE_LABEL, None)
            self.plan.launches.append(Launch(
                node_pool=pool.name, node_class=t.pool.node_class, capacity_type=ct, zones=zones,
                instance_types=types, pods=tuple(keys), labels=labels, taints=pool.taints,
                startup_taints=pool.startup_taints, hourly_price=price, capacity_types=pool.capacity_types,
            ))

    def _launch(self, n: _Node, cache: dict[tuple[object, ...], tuple[str, tuple[str, ...], tuple[str, ...], float]
                                             | str]) -> tuple[str, tuple[str, ...], tuple[str, ...], float] | str:
        t, ty = n.target, n.type_
        assert t is not None and ty is not None
        key = (id(t), n.used, n.zones, n.cts, n.allowed, id(ty) if t.pool.pool.limits else None)
        hit = cache.get(key)
        if hit is not None:
            return hit
        result: tuple[str, tuple[str, ...], tuple[str, ...], float] | str = (
            f"NodePool {t.pool.pool.name}: no instance type fits the pods together")
        for ct in ("spot", "on-demand"):
            if ct not in n.cts:
                continue
            # Any type the target allows may be listed (one that fits every pod on the node fits each class's).
            skey = (t.sig, n.zones, ct)
            ordered = self.sorted_cache.get(skey)
            if ordered is None:
                base = t.types if t.base_types is None else t.base_types
                ordered = sorted(((p, x.name, x) for x in base if (p := _price(x, n.zones, ct)) < _INF),
                                 key=lambda e: (e[0], e[1]))
                self.sorted_cache[skey] = ordered
            cands = []
            need_all = any(r.min_values for r in t.pool.pool.requirements)
            limits, used, allowed = t.pool.pool.limits, n.used, n.allowed
            for p, name, x in ordered:
                if not _le(used, x.alloc) or (allowed is not None and name not in allowed):
                    continue
                if limits and any(x.capacity.get(k, 0) > v for k, v in ty.capacity.items() if k in limits):
                    continue
                cands.append((p, name, x))
                if len(cands) >= MAX_INSTANCE_TYPES and not need_all:
                    break
            if not cands:
                continue
            chosen = _with_min_values([e[2] for e in cands], t.pool.pool.requirements)
            if chosen is None:
                result = (f"NodePool {t.pool.pool.name}: the instance types that fit do not meet its minValues")
                continue
            zones = tuple(sorted(z for z in n.zones if any((z, ct) in x.offerings for x in chosen)))
            result = (ct, zones, tuple(x.name for x in chosen), cands[0][0])
            break
        cache[key] = result
        return result


def plan(snapshot: PlanInput, *, unavailable: Collection[tuple[str, str, str]] = (),
         timer: Callable[[], float] | None = None, prepared: Prepared | None = None) -> Plan:
    """Decide where every pending pod goes. ``unavailable`` lists (instance type, zone, capacity type)
    offerings to avoid (recent insufficient-capacity errors, interrupted spot pools).

    Preferred pod affinity and anti-affinity are honoured as if required; a pod the plan cannot place
    gives up one preferred term and the plan is made again, until it is placed or has none left.

    ``timer`` (a monotonic seconds reading, injected: the domain reads no clock) measures
    ``solve_seconds``; without it that is 0. ``prepared``: what a warm caller kept (``prepared.py``);
    the plan is the same without it."""
    start = timer() if timer else 0.0
    relaxed: dict[str, int] = {}
    terms = {p.key: _preferred_terms(p) for p in snapshot.pods
             if (p.preferred_pod_affinity or p.preferred_pod_anti_affinity) and p.is_pending}
    while True:
        snap = _preferences_as_required(snapshot, terms, relaxed)
        scheduler = _Scheduler(snap, unavailable, prepared=prepared)
        scheduler.soft = {k: frozenset(t for _, t in v[relaxed.get(k, 0):]) for k, v in terms.items()}
        result = scheduler.run()
        stuck = [u.pod for u in result.unschedulable if relaxed.get(u.pod, 0) < len(terms.get(u.pod, ()))]
        if not stuck:
            break
        for key in stuck:
            relaxed[key] = relaxed.get(key, 0) + 1
    result.solve_seconds = timer() - start if timer else 0.0
    return result
