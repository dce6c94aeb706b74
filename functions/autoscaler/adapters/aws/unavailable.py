"""The capacity-error cache: offerings that recently failed for lack of capacity, each forgotten after a
TTL (Karpenter's 3-minute ICE cache). Lives in the warm Lambda container."""

from __future__ import annotations

from autoscaler.app.ports import Clock
from autoscaler.domain.fleet import OfferingKey


class UnavailableOfferings:
    """Offerings that recently failed for lack of capacity, each forgotten after ``ttl`` seconds
    (Karpenter's 3-minute ICE cache). Lives in the warm container; the planner reads ``snapshot()``."""

    def __init__(self, clock: Clock, *, ttl: float = 180.0) -> None:
        self._clock = clock
        self._ttl = ttl
        self._until: dict[OfferingKey, float] = {}

    def mark(self, instance_type: str, zone: str, capacity_type: str, *, ttl: float | None = None) -> None:
        self._until[(instance_type, zone, capacity_type)] = self._clock.monotonic() + (
            self._ttl if ttl is None else ttl
        )

    def _expire(self) -> None:
        """The one expiry rule: an entry is gone once the clock reaches its time."""
        now = self._clock.monotonic()
        for key in [k for k, until in self._until.items() if now >= until]:
            del self._until[key]

    def is_unavailable(self, instance_type: str, zone: str, capacity_type: str) -> bool:
        self._expire()
        return (instance_type, zone, capacity_type) in self._until

    def snapshot(self) -> frozenset[OfferingKey]:
        self._expire()
        return frozenset(self._until)

    def __len__(self) -> int:
        return len(self.snapshot())
