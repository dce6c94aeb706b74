"""Capacity reservations (On-Demand Capacity Reservations and Capacity Blocks) as the launcher and the
disruption pass see them: parsed from DescribeCapacityReservations, which are usable now, which one a
launch targets first, and when a Capacity Block's nodes must leave.

Semantics follow Karpenter provider-aws: a reservation is a ``karpenter.sh/capacity-type: reserved``
offering of one instance type in one zone, preferred over on-demand and spot (it is already paid for);
a Capacity Block is "expiring" 40 minutes before its ``EndDate`` (EC2 starts reclaiming its instances
30 minutes before the end), from then on it takes no launch and its nodes are replaced and drained.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from autoscaler.domain.keys import CAPACITY_RESERVATION_ID_LABEL, CAPACITY_RESERVATION_TYPE_LABEL
from autoscaler.domain.objects import ec2_timestamp

ReservationType = Literal["default", "capacity-block"]
# Karpenter's capacityReservationExpirationPeriod.
CAPACITY_BLOCK_EXPIRATION_LEAD = 40 * 60.0
# EC2 error codes after which a reservation is treated as empty until it is described again.
RESERVATION_FULL_CODES = frozenset({"ReservationCapacityExceeded", "InsufficientInstanceCapacity",
                                    "InsufficientReservedInstanceCapacity"})


@dataclass(frozen=True, slots=True)
class CapacityReservation:
    """One reservation. ``available`` is EC2's ``AvailableInstanceCount`` when it was described."""

    reservation_id: str
    instance_type: str
    zone: str
    available: int
    owner_id: str = ""
    reservation_type: ReservationType = "default"
    end_time: float | None = None  # epoch seconds; None: open-ended (an ODCR without an end date)
    match_criteria: str = "open"

    def expiring(self, now: float) -> bool:
        """A Capacity Block within 40 minutes of its end (Karpenter's ``expiring`` state)."""
        return (self.reservation_type == "capacity-block" and self.end_time is not None
                and now >= self.end_time - CAPACITY_BLOCK_EXPIRATION_LEAD)

    def usable(self, now: float) -> bool:
        """Takes launches now: not ended and not an expiring Capacity Block."""
        return (self.end_time is None or now < self.end_time) and not self.expiring(now)

    @property
    def labels(self) -> dict[str, str]:
        """The labels Karpenter puts on a node launched into it."""
        return {CAPACITY_RESERVATION_ID_LABEL: self.reservation_id,
                CAPACITY_RESERVATION_TYPE_LABEL: self.reservation_type}


def reservation_from_ec2(raw: Mapping[str, Any]) -> CapacityReservation:
    """A DescribeCapacityReservations ``CapacityReservation`` (boto3's datetimes or the CLI's strings).
    Raises ValueError naming a missing field or an unknown reservation type."""
    for required in ("CapacityReservationId", "InstanceType", "AvailabilityZone"):
        if not raw.get(required):
            raise ValueError(f"{required} is required")
    kind = str(raw.get("ReservationType") or "default")
    if kind not in ("default", "capacity-block"):
        raise ValueError(f"ReservationType {kind!r} is not default or capacity-block")
    return CapacityReservation(
        reservation_id=str(raw["CapacityReservationId"]), instance_type=str(raw["InstanceType"]),
        zone=str(raw["AvailabilityZone"]), available=int(raw.get("AvailableInstanceCount") or 0),
        owner_id=str(raw.get("OwnerId") or ""), reservation_type="capacity-block" if kind == "capacity-block"
        else "default", end_time=ec2_timestamp(raw.get("EndDate")),
        match_criteria=str(raw.get("InstanceMatchCriteria") or "open"),
    )


def launch_order(reservations: Iterable[CapacityReservation], *, instance_types: Iterable[str],
                 zones: Collection[str], remaining: Mapping[str, int], now: float) -> list[CapacityReservation]:
    """The reservations a launch may use, best first: in the launch's instance-type order (cheapest
    first, as the planner listed them), then the reservation with the most room. Only usable ones with
    room left (``remaining``: reservation id -> instances it still takes) in an allowed zone."""
    order = {name: i for i, name in enumerate(instance_types)}
    usable = [r for r in reservations if r.instance_type in order and (not zones or r.zone in zones)
              and r.usable(now) and remaining.get(r.reservation_id, 0) > 0]
    return sorted(usable, key=lambda r: (order[r.instance_type], -remaining[r.reservation_id], r.reservation_id))
