"""Capacity reservations from an EC2NodeClass's ``capacityReservationSelectorTerms``
(DescribeCapacityReservations, cached like subnets) and how many instances each still takes.

Counting follows Karpenter's availability cache: EC2's ``AvailableInstanceCount`` when described, minus
what this container launched into the reservation since (so one pass, and the next passes of a warm
container, never plan more than the reservation holds), set to 0 when EC2 answers that it is full.
A fresh description replaces the count: EC2 counts every running instance, ours or not.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from autoscaler.adapters.aws._calls import Caller, TtlCache
from autoscaler.app.ports import Clock
from autoscaler.domain.nodeclass import CapacityReservationSelectorTerm, NodeClass
from autoscaler.domain.reservations import CapacityReservation, launch_order, reservation_from_ec2

_ACTIVE = {"Name": "state", "Values": ["active"]}


def _queries(term: CapacityReservationSelectorTerm) -> list[dict[str, Any]]:
    """Karpenter's queries for one term: by id, and/or by tags, owner and match criteria."""
    out: list[dict[str, Any]] = []
    if term.id:
        out.append({"CapacityReservationIds": [term.id], "Filters": [_ACTIVE]})
    if term.tags or term.instance_match_criteria:
        filters: list[dict[str, Any]] = [_ACTIVE]
        if term.owner_id:
            filters.append({"Name": "owner-id", "Values": [term.owner_id]})
        for key, value in sorted((term.tags or {}).items()):
            filters.append({"Name": "tag-key", "Values": [key]} if value == "*"
                           else {"Name": f"tag:{key}", "Values": [value]})
        if term.instance_match_criteria:
            filters.append({"Name": "instance-match-criteria", "Values": [term.instance_match_criteria]})
        out.append({"Filters": filters})
    return out


class CapacityReservations:
    """Resolves reservation selector terms, caching each distinct term set for ``ttl`` seconds."""

    def __init__(self, ec2: Any, *, clock: Clock, ttl: float = 60.0) -> None:
        self._ec2 = Caller(ec2)
        self._clock = clock
        self._cache: TtlCache[list[CapacityReservation]] = TtlCache(clock=clock, ttl=ttl)
        self._remaining: dict[str, int] = {}
        self._lock = threading.Lock()  # launch groups run in parallel

    @property
    def calls(self) -> dict[str, int]:
        return dict(self._ec2.calls)

    def for_node_class(self, node_class: NodeClass) -> list[CapacityReservation]:
        """Every active, unended reservation any of the node class's terms selects (deduplicated)."""
        terms = node_class.capacity_reservation_selector_terms
        if not terms:
            return []
        key = "|".join(t.model_dump_json() for t in terms)
        return self._cache.get_or_load(key, lambda: self._load([q for t in terms for q in _queries(t)]))

    def by_ids(self, ids: Iterable[str]) -> list[CapacityReservation]:
        """The named reservations as EC2 describes them now, ended ones too (uncached: the disruption pass
        asks once per run for the reservations its nodes run in)."""
        wanted = sorted(set(ids))
        return self._load([{"CapacityReservationIds": wanted}], live_only=False) if wanted else []

    def _load(self, queries: list[dict[str, Any]], *, live_only: bool = True) -> list[CapacityReservation]:
        found: dict[str, CapacityReservation] = {}
        now = self._clock.now()
        for query in queries:
            for page in self._ec2.pages("describe_capacity_reservations", **query):
                for raw in page.get("CapacityReservations", ()):
                    r = reservation_from_ec2(raw)
                    if not live_only or r.end_time is None or r.end_time > now:
                        found[r.reservation_id] = r
        with self._lock:
            for r in found.values():
                self._remaining[r.reservation_id] = r.available
        return sorted(found.values(), key=lambda r: r.reservation_id)

    def remaining(self, reservation_id: str) -> int:
        return self._remaining.get(reservation_id, 0)

    def candidates(self, node_class: NodeClass, *, instance_types: Iterable[str],
                   zones: Iterable[str]) -> list[CapacityReservation]:
        """The reservations a launch of these types in these zones may use, best first."""
        return launch_order(self.for_node_class(node_class), instance_types=instance_types, zones=set(zones),
                            remaining=self._remaining, now=self._clock.now())

    def mark_launched(self, reservation_id: str, count: int = 1) -> None:
        with self._lock:
            self._remaining[reservation_id] = max(0, self._remaining.get(reservation_id, 0) - count)

    def mark_full(self, reservation_id: str) -> None:
        with self._lock:
            self._remaining[reservation_id] = 0
