"""Topology-spread arithmetic: how many pods each domain takes while kube-scheduler's skew rule admits
them, and the relaxed water-filling a ScheduleAnyway constraint falls back to."""

from __future__ import annotations

import heapq
from collections.abc import Mapping

INFINITY = float("inf")


def spread(allowed: set[str], every: set[str], counts: Mapping[str, int], pods: int, *, max_skew: int,
           min_zero: bool, room: Mapping[str, int] | None = None) -> tuple[dict[str, int], int]:
    """Place up to ``pods`` pods in ``allowed`` domains, always into the one with the fewest matching pods,
    while kube's skew rule admits it: count + 1 - global minimum (over ``every`` domain; 0 when
    ``min_zero``) <= maxSkew. A domain in ``room`` takes at most that many (existing nodes only, no
    NodePool launches there). Returns the counts per domain and how many could not be placed."""
    room = room or {}
    have = {domain: counts.get(domain, 0) for domain in every | allowed}
    out: dict[str, int] = {}
    others = [have[domain] for domain in have if domain not in allowed]
    floor_others = min(others) if others else INFINITY
    candidates = set(allowed)
    while pods > 0:
        candidates = {domain for domain in candidates if domain not in room or out.get(domain, 0) < room[domain]}
        if not candidates:
            break
        emptiest = min(candidates, key=lambda domain: (have[domain], domain))
        if not min_zero and not others and not room and pods >= len(allowed) and all(
                have[domain] == have[emptiest] for domain in allowed):
            rounds = pods // len(allowed)  # level: a whole round each at once (skew stays 0 among them)
            for domain in allowed:
                have[domain] += rounds
                out[domain] = out.get(domain, 0) + rounds
            pods -= rounds * len(allowed)
            continue
        low = 0 if min_zero else min(floor_others, *(have[domain] for domain in allowed))
        room_skew = low + max_skew - have[emptiest]
        if room_skew <= 0:
            break
        following = min((have[domain] for domain in candidates if domain != emptiest), default=have[emptiest] + pods)
        taken = int(min(pods, room_skew, max(1, following - have[emptiest]),
                        room[emptiest] - out.get(emptiest, 0) if emptiest in room else pods))
        have[emptiest] += taken
        out[emptiest] = out.get(emptiest, 0) + taken
        pods -= taken
    return out, pods


def water_fill(domains: set[str], counts: Mapping[str, int], pods: int,
               room: Mapping[str, int] | None = None) -> dict[str, int]:
    """Place up to ``pods`` pods one at a time in the domain with the fewest matching pods (kube's skew
    rule always admits that domain), a domain in ``room`` taking at most that many; counts per domain."""
    room = room or {}
    heap = [(counts.get(domain, 0), domain) for domain in sorted(domains) if room.get(domain, 1) > 0]
    heapq.heapify(heap)
    out = dict.fromkeys(domains, 0)
    while pods > 0 and heap:
        have, domain = heapq.heappop(heap)
        following = heap[0][0] if heap else have + pods
        taken = min(pods, max(1, following - have), room[domain] - out[domain] if domain in room else pods)
        out[domain] += taken
        pods -= taken
        if domain not in room or out[domain] < room[domain]:
            heapq.heappush(heap, (have + taken, domain))
    return out
