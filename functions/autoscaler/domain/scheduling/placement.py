"""Placement: in-flight instances take back their pods, classes are split into per-domain chunks by
topology spread and filled onto existing and already-opened nodes, node-shaping classes open their
own nodes, and the rest is deferred to group packing."""

from __future__ import annotations

import math
from dataclasses import replace

from autoscaler.domain import resources as res
from autoscaler.domain.keys import CAPACITY_TYPE_LABEL, HOSTNAME_LABEL, ZONE_KEYS, ZONE_LABEL
from autoscaler.domain.models import TopologySpreadConstraint
from autoscaler.domain.scheduling.model import (
    _INF,
    Vec,
    _add,
    _Chunk,
    _Class,
    _fit,
    _Node,
    _selects,
    _sizing_price,
    _Target,
)
from autoscaler.domain.scheduling.rules import _duals, _spread, _water_fill
from autoscaler.domain.scheduling.topology import _Topology


class _Placement(_Topology):
    """Where each class's pods go on existing, in-flight and opened nodes."""

    def _place_launched_for(self) -> None:
        """Pods an in-flight instance was launched for go back onto it before anything else, so a later
        pass never launches again for them (when they still fit and still may go there)."""
        flights = [n for n in self.existing if n.launched_for]
        if not flights:
            return
        cls_of = {p.key: c for c in self.classes if c.error is None for p in c.pods}
        for n in flights:
            for key in n.launched_for:
                c = cls_of.get(key)
                if c is None:
                    continue
                # A pod that no longer fits here stays free for the next instance that names it (a
                # sibling of the same launch, an older claim) and then for ordinary placement.
                if (not self._node_ok(c, n, c.variant) or self._conflict(c, n) or _fit(n.free, c.req) < 1
                        or self._node_cap(c, n) < 1):
                    continue
                del cls_of[key]
                self._put(c, n, 1)
                n.pinned.setdefault(c.id, []).append(key)
                zone = n.labels.get(ZONE_LABEL)
                if zone:
                    c.zone_counts[zone] = c.zone_counts.get(zone, 0) + 1

    def _chunks(self, c: _Class) -> list[tuple[frozenset[str] | None, frozenset[str] | None, int]]:
        """Split the class into (zones, capacity types, count) by spread, zonal affinity/anti-affinity."""
        n = len(c.pods) - c.placed
        banned = self._banned_by_others(c, ZONE_LABEL)
        zonal = banned or ZONE_LABEL in self.pinned.get(c.id, ()) or any(
            t.topology_key in ZONE_KEYS for t in (*c.rep.pod_affinity, *c.rep.pod_anti_affinity))
        usable = self._usable(c, ZONE_LABEL)[0] if zonal else set()  # only zonal (anti-)affinity needs it
        zone_sets: list[tuple[frozenset[str] | None, int]] = [(c.zone_pin, n)]
        if banned:
            usable -= banned
            if not usable:
                self._unschedulable(c, n, "pod anti-affinity on zone: every zone it may use holds a pod whose "
                                    "anti-affinity excludes it")
                return []
            zone_sets = [(frozenset(usable), n)]
        for term in c.rep.pod_affinity:
            if term.topology_key not in ZONE_KEYS:
                continue
            counts = self._matching_counts(c, term, ZONE_LABEL, namespaces=term.namespaces)
            have = sorted((z for z in counts if z in usable), key=lambda z: (-counts[z], z))
            if have:
                zone_sets = [(frozenset({have[0]}), n)]
            elif _selects(term, owner_ns=c.rep.namespace, pod=c) and usable:
                zone_sets = [(frozenset({self._cheapest_zone(c, usable)}), n)]
            else:
                self._unschedulable(c, n, "pod affinity: no pod in any zone matches its required podAffinity")
                return []
        for term in c.rep.pod_anti_affinity:
            if term.topology_key not in ZONE_KEYS:
                continue
            counts = self._matching_counts(c, term, ZONE_LABEL, namespaces=term.namespaces)
            free = sorted(z for z in usable if counts.get(z, 0) == 0)
            if _selects(term, owner_ns=c.rep.namespace, pod=c):
                zone_sets = [(frozenset({z}), 1) for z in free[:n]]
                if n > len(free):
                    self._unschedulable(c, n - len(free), "pod anti-affinity on zone: every allowed zone "
                                        "already has a matching pod")
            else:
                zone_sets = [(frozenset(free), n)] if free else []
                if not free:
                    self._unschedulable(c, n, "pod anti-affinity on zone: every allowed zone has a matching pod")
        out: list[tuple[frozenset[str] | None, frozenset[str] | None, int]] = []
        for zones, count in zone_sets:
            parts: list[tuple[frozenset[str] | None, frozenset[str] | None, int]] = [(zones, None, count)]
            for tsc in c.rep.topology_spread:
                if tsc.topology_key not in ZONE_KEYS and tsc.topology_key != CAPACITY_TYPE_LABEL:
                    continue
                if not _selects(tsc.label_selector, owner_ns=c.rep.namespace, pod=c):
                    continue  # its own pods do not count: placing them never changes the skew
                parts = self._spread_parts(c, tsc, parts, banned)
            out.extend(parts)
        if ZONE_LABEL in self.pinned.get(c.id, ()):
            # Others follow (or avoid) this class's zone: decide it now instead of at launch.
            out = [(z, ct, k) if z is not None and len(z) == 1 else
                   (frozenset({self._cheapest_zone(c, set(z) & usable if z else usable)}), ct, k)
                   if (set(z) & usable if z else usable) else (z, ct, k) for z, ct, k in out]
        for zones, cts, k in out:  # what later classes' spread and affinity count
            if zones is not None and len(zones) == 1:
                z = next(iter(zones))
                c.zone_counts[z] = c.zone_counts.get(z, 0) + k
            if cts is not None and len(cts) == 1:
                ct_counts = c.domain_counts.setdefault(CAPACITY_TYPE_LABEL, {})
                v = next(iter(cts))
                ct_counts[v] = ct_counts.get(v, 0) + k
        return out

    def _spread_parts(self, c: _Class, tsc: TopologySpreadConstraint,
                      parts: list[tuple[frozenset[str] | None, frozenset[str] | None, int]],
                      banned: set[str]) -> list[tuple[frozenset[str] | None, frozenset[str] | None, int]]:
        """Split each part over the domains of a zone or capacity-type spread constraint."""
        is_zone = tsc.topology_key in ZONE_KEYS
        domains, room = self._usable(c, tsc.topology_key)
        if is_zone:
            domains -= banned
        every = self._spread_every(c, tsc) | domains
        counts = self._matching_counts(c, tsc.label_selector, tsc.topology_key, spread=tsc)
        hard = tsc.when_unsatisfiable == "DoNotSchedule"
        # minDomains: with fewer eligible domains than asked, the global minimum is 0.
        min_zero = hard and tsc.min_domains is not None and len(every) < tsc.min_domains
        new_parts: list[tuple[frozenset[str] | None, frozenset[str] | None, int]] = []
        for pz, pc, pn in parts:
            doms = domains & (pz or domains) if is_zone else domains & (pc or domains)
            if not doms:
                self._unschedulable(c, pn, f"topology spread on {tsc.topology_key}: no domain it may use has room "
                                    "or a NodePool that can launch there")
                continue
            got, over = _spread(doms, every, counts, pn, max_skew=tsc.max_skew, min_zero=min_zero, room=room)
            if over and not hard:  # ScheduleAnyway: a preference, relaxed once it cannot be met
                extra = _water_fill(doms, {d: counts.get(d, 0) + got.get(d, 0) for d in doms}, over,
                                    room={d: r - got.get(d, 0) for d, r in room.items()})
                for d, k in extra.items():
                    got[d] = got.get(d, 0) + k
                    over -= k
            if over and hard and self._relax(c, over):
                over = 0
            if over:
                self._unschedulable(c, over, f"topology spread on {tsc.topology_key}: maxSkew {tsc.max_skew} would "
                                    "be exceeded in every domain it may use" if hard else
                                    f"topology spread on {tsc.topology_key}: no domain it may use has room left")
            for dom, k in sorted(got.items()):
                if k:
                    new_parts.append((frozenset({dom}), pc, k) if is_zone else (pz, frozenset({dom}), k))
                    counts[dom] = counts.get(dom, 0) + k
                    if dom in room:
                        room[dom] -= k
        return new_parts

    def _place(self, c: _Class, zones: frozenset[str] | None, cts: frozenset[str] | None, count: int) -> None:
        affinity_nodes = self._hostname_affinity(c)
        self_affine = affinity_nodes is not None and all(
            _selects(t, owner_ns=c.rep.namespace, pod=c) for t in c.rep.pod_affinity
            if t.topology_key == HOSTNAME_LABEL)
        candidates = self.existing if affinity_nodes is None else [n for n in affinity_nodes if n.name]
        count = self._place_existing(c, zones, cts, count, candidates)
        if count == 0:
            return
        opened = self.open if affinity_nodes is None else [n for n in affinity_nodes if not n.name]
        rc, rm = c.req[0], c.req[1]  # cpu and memory come first in self.keys
        for n in opened:
            if count == 0:
                return
            f = n.free
            if f[0] < rc or f[1] < rm or f[2] < 1:  # the common case, checked without a call
                continue
            k = self._open_fit(c, n, zones, cts, count)
            if k > 0:
                self._put(c, n, k)
                count -= k
        if count == 0:
            return
        if affinity_nodes:
            self._unschedulable(c, count, "pod affinity on hostname: the node with matching pods is full")
            return
        if affinity_nodes is not None and not self_affine:
            self._unschedulable(c, count, "pod affinity on hostname: no pod matches its required podAffinity")
            return
        if affinity_nodes is not None or c.shapes_nodes or c.id in self.host_targets:
            self._open_nodes(c, zones, cts, count, single=affinity_nodes is not None)
            return
        self._defer(c, zones, cts, count)

    def _place_existing(self, c: _Class, zones: frozenset[str] | None, cts: frozenset[str] | None, count: int,
                        candidates: list[_Node] | None = None) -> int:
        """Put what fits on existing nodes and in-flight instances; returns how many are left."""
        for n in self.existing if candidates is None else candidates:
            if count == 0:
                break
            if (zones is not None and not n.zones & zones) or (cts is not None and not n.cts & cts):
                continue
            if not self._node_ok(c, n, c.variant) or self._conflict(c, n):
                continue
            k = min(count, _fit(n.free, c.req))
            if k > 0:
                k = min(k, self._node_cap(c, n))
            if k > 0:
                self._put(c, n, k)
                count -= k
        return count

    def _fill_open(self, items: list[_Chunk]) -> None:
        """Fill the nodes opened so far from ``items`` (their ``left`` decremented in place): per node,
        take from the CPU-heavy end when memory is the fuller dimension and from the memory-heavy end
        otherwise, in small chunks, as ``_fill_balanced`` does."""
        cpu, mem = self.keys.index(res.CPU), self.keys.index(res.MEMORY)
        live = sorted(items, key=lambda it: (it.cls.req[mem] / max(it.cls.req[cpu], 1), it.cls.id))
        for n in self.open:
            live = [it for it in live if it.left]
            if not live:
                return
            lo, hi = 0, len(live) - 1
            lim_c, lim_m = max(n.limit[cpu], 1), max(n.limit[mem], 1)
            while lo <= hi:
                f = n.free
                take_lo = f[cpu] / lim_c >= f[mem] / lim_m
                it = live[lo] if take_lo else live[hi]
                c, left = it.cls, it.left
                k = 0
                if left and f[cpu] >= c.req[cpu] and f[mem] >= c.req[mem] and f[2] >= 1:
                    want = min(left, max(1, _fit(n.limit, c.req) // 16))
                    k = self._open_fit(c, n, it.zones, it.cts, want)
                if k > 0:
                    self._put(c, n, k)
                    it.left = left - k
                if k <= 0 or it.left == 0:
                    if take_lo:
                        lo += 1
                    else:
                        hi -= 1

    def _defer(self, c: _Class, zones: frozenset[str] | None, cts: frozenset[str] | None, count: int) -> None:
        """Queue pods for bulk packing on the first NodePool target that can hold them."""
        for t in c.targets:
            z = t.zones if zones is None else t.zones & zones
            ct = t.cts if cts is None else t.cts & cts
            if z and ct:
                key = (t.sig, z, ct)
                entry = self.deferred.get(key)
                if entry is None:
                    # The group's nodes may be any type the target allows, not only those this class fits.
                    full = t if t.base_types is None else replace(t, types=t.base_types, sizing=None)
                    entry = self.deferred[key] = (full, z, ct, [])
                entry[3].append([c, count])
                return
        self._unschedulable(c, count, self._why_not(c, zones))

    def _open_fit(self, c: _Class, n: _Node, zones: frozenset[str] | None, cts: frozenset[str] | None,
                  count: int) -> int:
        """How many pods of ``c`` a node opened earlier in this plan takes (narrowing its zones, capacity
        types and instance types to what ``c`` allows)."""
        if _fit(n.free, c.req) == 0:
            return 0
        t, ty = n.target, n.type_
        assert t is not None and ty is not None
        x = next((x for x in c.targets if x.pool is t.pool), None)
        if x is None:
            return 0
        same = x.sig == t.sig
        if not same:
            if x.names is None:
                x.names = frozenset(y.name for y in x.types)
            if ty.name not in x.names or any(n.labels.get(k, v) != v for k, v in x.labels.items()):
                return 0
        z = n.zones & x.zones if zones is None else n.zones & x.zones & zones
        ct = n.cts & x.cts if cts is None else n.cts & x.cts & cts
        if not z or not ct or not any((zz, cc) in ty.offerings for zz in z for cc in ct):
            return 0
        if self._conflict(c, n):
            return 0
        k = min(count, self._node_cap(c, n), _fit(n.free, c.req))
        if k > 0:
            n.zones, n.cts = frozenset(z), frozenset(ct)
            if not same:
                assert x.names is not None
                n.allowed = x.names if n.allowed is None else n.allowed & x.names
                n.labels.update(x.labels)
        return k

    def _open_nodes(self, c: _Class, zones: frozenset[str] | None, cts: frozenset[str] | None, count: int,
                    *, single: bool) -> None:
        """New nodes for a class that shapes them (a per-node cap, conflicts, or hostname affinity)."""
        reason = ""
        for t in c.targets:
            z = t.zones if zones is None else t.zones & zones
            ct = t.cts if cts is None else t.cts & cts
            if not z or not ct:
                continue
            types = [x for x in (t.types if t.sizing is None else t.sizing) if _sizing_price(x, z, ct) < _INF]
            if not types:
                continue
            per_node = min(c.cap, count)
            if single:
                per_node = count
            share, duals = self._share(c, t)
            want = _add(share, c.req, per_node)
            fitting = [x for x in types if _fit(x.alloc, c.req) >= per_node]
            if fitting:
                # The node's price plus what the part of its share it cannot hold costs when packed in
                # bulk (at the LP's shadow prices): small efficient nodes win when the bulk is cheap,
                # and a node is never bought larger than the pods that will fill it.
                ty = min(fitting, key=lambda x: (_sizing_price(x, z, ct) + sum(
                    y * max(0, w - a) for y, w, a in zip(duals, want, x.alloc, strict=True)), x.name))
            else:
                ty = min(types, key=lambda x: _sizing_price(x, z, ct) / max(min(_fit(x.alloc, c.req), per_node), 1e-9))
            while count > 0:
                k = min(per_node, count, _fit(ty.alloc, c.req))
                if k <= 0:
                    break
                node = self._new_node(t, ty, z, ct)
                if node is None:
                    reason = f"NodePool {t.pool.pool.name} limit reached ({self._limit_key(t.pool, ty)})"
                    break
                self._put(c, node, k)
                count -= k
                if single:
                    break
            if count == 0:
                return
            if single:
                self._unschedulable(c, count, "pod affinity on hostname: its pods do not all fit on one node")
                return
        self._unschedulable(c, count, reason or self._why_not(c, zones))

    def _share(self, c: _Class, t: _Target) -> tuple[Vec, tuple[float, ...]]:
        """What each node opened for a shaped class should also hold: the rest of the NodePool's pending
        demand divided by the number of nodes its largest shaped family needs (a family is a class and
        the classes it may not share a node with), so the other pods fill those nodes instead of new ones."""
        if t.pool.index in self.share_cache:
            return self.share_cache[t.pool.index]
        in_pool = [d for d in self.classes if d.error is None and d.targets and d.targets[0].pool is t.pool]
        total = [0] * len(self.keys)
        for d in in_pool:
            for i, r in enumerate(d.req):
                total[i] += r * len(d.pods)
        nodes, family_demand = 1, [0] * len(self.keys)
        for d in in_pool:
            if not d.shapes_nodes:
                continue
            fam = [e for e in in_pool if e.id == d.id or e.id in d.conflicts
                   or any(e.id in ids for _, ids, _t in d.host_spread)]
            need = math.ceil(sum(len(e.pods) for e in fam) / max(d.cap, 1))
            if need > nodes:
                nodes = need
                family_demand = [sum(e.req[i] * len(e.pods) for e in fam) for i in range(len(self.keys))]
        share = tuple(max(0, (a - b)) // nodes for a, b in zip(total, family_demand, strict=True))
        types = [x for x in t.pool.types if _sizing_price(x, t.pool.zones, t.pool.cts) < _INF]
        duals = _duals(types, [(d, len(d.pods)) for d in in_pool] or [(c, len(c.pods))], total,
                       zones=t.pool.zones, cts=t.pool.cts, keys=self.keys)
        self.share_cache[t.pool.index] = (share, duals)
        return share, duals
