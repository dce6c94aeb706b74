"""moto's gap in capacity reservations, closed at the boto3 boundary: moto has no
DescribeCapacityReservations and ignores a launch template's ``CapacityReservationSpecification``.
``CapacityReservationStub`` keeps a small in-memory store of reservations (On-Demand Capacity
Reservations and Capacity Blocks) and, installed on a boto3 Session's or a client's event emitter:

- answers DescribeCapacityReservations from the store (``CapacityReservationIds`` and the filters
  Karpenter sends: ``state``, ``owner-id``, ``tag:KEY``, ``tag-key``, ``instance-match-criteria``);
- on CreateFleet whose launch template targets a reservation: launches no more than the reservation
  still holds (the rest is an ``Errors`` entry ``ReservationCapacityExceeded``, as EC2 answers),
  counts the instances against it and records the request (``launches``);
- gives DescribeInstances' instances in a reservation their ``CapacityReservationId``;
- gives the capacity back on TerminateInstances.

docs/aws.md describes it; like ``ec2_groups`` it exists only for tests and the simulator.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from botocore.awsrequest import AWSResponse

OWNER = "123456789012"


@dataclass
class StubReservation:
    reservation_id: str
    instance_type: str
    zone: str
    total: int
    available: int
    reservation_type: str = "default"  # or "capacity-block"
    end_date: float | None = None  # epoch seconds
    tags: dict[str, str] = field(default_factory=dict)
    owner_id: str = OWNER
    match_criteria: str = "targeted"
    state: str = "active"

    def as_ec2(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "CapacityReservationId": self.reservation_id, "InstanceType": self.instance_type,
            "AvailabilityZone": self.zone, "TotalInstanceCount": self.total,
            "AvailableInstanceCount": self.available, "State": self.state, "OwnerId": self.owner_id,
            "InstanceMatchCriteria": self.match_criteria, "ReservationType": self.reservation_type,
            "InstancePlatform": "Linux/UNIX", "Tenancy": "default",
            "Tags": [{"Key": k, "Value": v} for k, v in sorted(self.tags.items())],
        }
        if self.end_date is not None:
            out["EndDate"] = datetime.fromtimestamp(self.end_date, UTC)
            out["EndDateType"] = "limited"
        return out

    def selected(self, filters: list[Mapping[str, Any]]) -> bool:
        for f in filters:
            name, values = str(f.get("Name", "")), [str(v) for v in f.get("Values", ())]
            value: str | None
            if name == "state":
                value = self.state
            elif name == "owner-id":
                value = self.owner_id
            elif name == "instance-match-criteria":
                value = self.match_criteria
            elif name == "tag-key":
                if not any(k in self.tags for k in values):
                    return False
                continue
            elif name.startswith("tag:"):
                value = self.tags.get(name[4:])
            else:
                raise ValueError(f"the capacity reservation stub does not know filter {name!r}")
            if value not in values:
                return False
        return True


@dataclass(frozen=True)
class FleetLaunch:
    """One CreateFleet into a reservation: what was asked and what launched."""

    reservation_id: str
    requested: int
    instance_ids: tuple[str, ...]


class CapacityReservationStub:
    def __init__(self) -> None:
        self.reservations: dict[str, StubReservation] = {}
        self.launches: list[FleetLaunch] = []
        self._instances: dict[str, str] = {}  # instance id -> reservation id
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def add(self, instance_type: str, zone: str, count: int, *, capacity_block: bool = False,
            end_date: float | None = None, tags: Mapping[str, str] | None = None,
            owner_id: str = OWNER) -> str:
        """A reservation of ``count`` instances; returns its id (``cr-...``)."""
        rid = f"cr-{next(self._ids):017x}"
        with self._lock:
            self.reservations[rid] = StubReservation(
                rid, instance_type, zone, count, count, "capacity-block" if capacity_block else "default",
                end_date, dict(tags or {}), owner_id)
        return rid

    def reservation_of(self, instance_id: str) -> str | None:
        return self._instances.get(instance_id)

    # ----- the hooks -----------------------------------------------------------------------------
    def install(self, events: Any, ec2: Callable[[], Any]) -> None:
        """Register on ``events`` (``session.events`` or ``client.meta.events``); ``ec2`` gives the client
        the hooks read launch templates with (made lazily)."""

        def remember(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
            context["stub_params"] = params

        def describe(context: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]]:
            params = context.get("stub_params") or {}
            ids = set(params.get("CapacityReservationIds") or ())
            with self._lock:
                found = [r.as_ec2() for r in self.reservations.values()
                         if (not ids or r.reservation_id in ids) and r.selected(params.get("Filters") or [])]
            return _ok(), {"CapacityReservations": found, "ResponseMetadata": {"HTTPStatusCode": 200}}

        def fleet_params(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
            if not self.reservations:
                return  # no reservation to target: no extra call on every launch
            target = self._targeted(params, ec2)
            if target is None:
                return
            asked = int(params["TargetCapacitySpecification"]["TotalTargetCapacity"])
            with self._lock:  # taken now, as EC2 does atomically: parallel launches never overfill it
                r = self.reservations.get(target)
                room = min(asked, r.available) if r is not None else 0
                if r is not None:
                    r.available -= room
            context["stub_fleet"] = (target, asked, room)
            if 0 < room < asked:
                params["TargetCapacitySpecification"]["TotalTargetCapacity"] = room

        def fleet_call(context: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]] | None:
            stub = context.get("stub_fleet")
            if stub is None or stub[2] > 0:
                return None
            self.launches.append(FleetLaunch(stub[0], stub[1], ()))
            return _ok(), {"FleetId": "fleet-reservation-full", "Instances": [], "Errors": [_full(stub[0])],
                           "ResponseMetadata": {"HTTPStatusCode": 200}}

        def fleet_done(parsed: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
            stub = context.get("stub_fleet")
            if stub is None or stub[2] == 0:
                return
            rid, asked, room = stub
            made = tuple(iid for f in parsed.get("Instances", ()) for iid in f.get("InstanceIds", ()))
            with self._lock:
                self.reservations[rid].available += room - len(made)  # what was taken but not launched
                for iid in made:
                    self._instances[iid] = rid
            self.launches.append(FleetLaunch(rid, asked, made))
            if len(made) < asked:
                parsed.setdefault("Errors", []).append(_full(rid))

        def instances_done(parsed: dict[str, Any], **_: Any) -> None:
            if not self._instances:
                return
            for r in parsed.get("Reservations", ()):
                for inst in r.get("Instances", ()):
                    rid = self._instances.get(inst.get("InstanceId", ""))
                    if rid is not None and inst.get("State", {}).get("Name") != "terminated":
                        inst["CapacityReservationId"] = rid

        def terminated(parsed: dict[str, Any], **_: Any) -> None:
            with self._lock:
                for change in parsed.get("TerminatingInstances", ()):
                    rid = self._instances.pop(change.get("InstanceId", ""), None)
                    if rid is not None and rid in self.reservations:
                        self.reservations[rid].available += 1

        events.register("before-parameter-build.ec2.DescribeCapacityReservations", remember)
        events.register("before-call.ec2.DescribeCapacityReservations", describe)
        events.register("before-parameter-build.ec2.CreateFleet", fleet_params)
        events.register("before-call.ec2.CreateFleet", fleet_call)
        events.register("after-call.ec2.CreateFleet", fleet_done)
        events.register("after-call.ec2.DescribeInstances", instances_done)
        events.register("after-call.ec2.TerminateInstances", terminated)

    @staticmethod
    def _targeted(params: Mapping[str, Any], ec2: Callable[[], Any]) -> str | None:
        for cfg in params.get("LaunchTemplateConfigs", ()):
            spec = cfg["LaunchTemplateSpecification"]
            [version] = ec2().describe_launch_template_versions(
                LaunchTemplateId=spec["LaunchTemplateId"], Versions=[spec.get("Version", "$Latest")],
            )["LaunchTemplateVersions"]
            target = ((version["LaunchTemplateData"].get("CapacityReservationSpecification") or {})
                      .get("CapacityReservationTarget") or {}).get("CapacityReservationId")
            if target:
                return str(target)
        return None


def _ok() -> AWSResponse:
    return AWSResponse("https://ec2.stub", 200, {}, None)  # type: ignore[arg-type]


def _full(reservation_id: str) -> dict[str, Any]:
    return {"ErrorCode": "ReservationCapacityExceeded", "Lifecycle": "on-demand",
            "ErrorMessage": f"capacity reservation {reservation_id} has no available capacity"}
