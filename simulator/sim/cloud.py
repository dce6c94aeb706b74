"""What EC2 calls do to the simulated world, observed at the boto3 boundary of the harness's session
(the session the handlers' runtime uses too, so every CreateFleet and TerminateInstances is seen).

- CreateFleet: each new instance is recorded with its virtual launch time, price, node claim and the
  pods it was launched for; the kubelet is told to boot it. A launch for a pod another live instance
  was already launched for, or under a node claim another live instance holds, is a duplicate launch.
- TerminateInstances: the instance stops costing money and the kubelet is told it is gone.
- Capacity errors: offerings the scenario marks unavailable are taken out of a CreateFleet request and
  answered as EC2 does, ``InsufficientInstanceCapacity`` errors naming each (the whole answer when none is
  left), so the autoscaler's capacity-error cache and fallback are exercised.
- DescribeInstances / DescribeLaunchTemplates: moto stamps ``LaunchTime`` / ``CreateTime`` with the
  wall clock; they are rewritten to virtual time so the autoscaler's registration timeouts and
  launch-template TTLs run on the simulation's clock like everything else.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from simulator.ec2_instance import Ec2Instance, ec2_instance
from simulator.local import Catalog, on_demand_prices, spot_price
from simulator.sim.engine import EventLoop


class _Http:
    status_code = 200
    headers: dict[str, str] = {}
    content = b""


def serve_catalog(session: Any, catalog: Catalog) -> None:
    """Answer DescribeInstanceTypes and DescribeInstanceTypeOfferings from moto's own data in memory:
    over HTTP the ~1,400 types take seconds, and the catalog's 5-minute cache expires every few virtual
    minutes. Must run before clients are created from ``session``."""
    infos, offerings = catalog

    def types(**_: Any) -> tuple[Any, dict[str, Any]]:
        return _Http(), {"InstanceTypes": infos}

    def offered(**_: Any) -> tuple[Any, dict[str, Any]]:
        return _Http(), {"InstanceTypeOfferings": offerings}

    session.events.register("before-call.ec2.DescribeInstanceTypes", types)
    session.events.register("before-call.ec2.DescribeInstanceTypeOfferings", offered)


_WITHHELD = "simulator.sim.cloud.withheld"  # a CreateFleet's withheld overrides, in its botocore context


@dataclass(frozen=True)
class _Withheld:
    overrides: list[dict[str, Any]]
    capacity_type: str
    all_gone: bool


@dataclass
class InstanceRecord:
    instance_id: str
    launched_at: float  # virtual seconds since the start
    instance: Ec2Instance | None = None  # described right after the launch
    terminated_at: float | None = None
    hourly_price: float = 0.0
    node_name: str | None = None
    duplicate_of: str | None = None  # the live instance this launch duplicated
    interrupted: bool = False  # EC2 sent it a spot interruption warning (or reclaimed it)
    call: int = 0  # which CreateFleet/RunInstances call launched it (a grouped launch's instances share one)
    # The pods it was launched for: its pod tags, or its node claim's pods in the claims table (a grouped
    # launch's instances share the group's tags; each one's own pods are recorded only there).
    pods: frozenset[str] = frozenset()

    @property
    def alive(self) -> bool:
        return self.terminated_at is None

    def cost(self, until: float) -> float:
        """Dollars spent on this instance up to virtual second ``until`` (per-second billing)."""
        end = self.terminated_at if self.terminated_at is not None else until
        return max(0.0, end - self.launched_at) / 3600.0 * self.hourly_price


@dataclass
class CloudWorld:
    loop: EventLoop
    region: str
    ec2: Any = None  # the simulation's own EC2 client (set by ``install``)
    instances: dict[str, InstanceRecord] = field(default_factory=dict)
    templates: dict[str, float] = field(default_factory=dict)  # launch template id -> virtual creation
    on_launch: list[Callable[[InstanceRecord], None]] = field(default_factory=list)
    on_terminate: list[Callable[[InstanceRecord], None]] = field(default_factory=list)
    duplicates: list[InstanceRecord] = field(default_factory=list)
    # Offerings EC2 has no capacity for: (instance type, zone or "*", capacity type or "*").
    unavailable: set[tuple[str, str, str]] = field(default_factory=set)
    capacity_errors: int = 0  # CreateFleet overrides answered InsufficientInstanceCapacity
    # Whether an instance is on its way out (interrupted, its node cordoned): capacity launched for its
    # pods then is a replacement, not a duplicate. The runner answers from the cluster.
    leaving: Callable[[InstanceRecord], bool] = lambda record: record.interrupted
    # Whether a pod (``namespace/name``) sits on a node that is going away: launching for it is replacing it.
    displaced: Callable[[str], bool] = lambda pod: False
    # instance id -> the pods its node claim names (the product's claims table); set by the runner.
    claimed_pods: Callable[[], dict[str, tuple[str, ...]]] = dict
    _prices: dict[str, float] = field(default_factory=dict)
    _calls: int = 0

    def install(self, session: Any, *, catalog: Catalog | None = None) -> CloudWorld:
        self._prices = on_demand_prices(self.region)
        events = session.events
        if catalog is not None:
            serve_catalog(session, catalog)
        events.register("provide-client-params.ec2.CreateFleet", self._withhold)
        events.register("before-call.ec2.CreateFleet", self._nothing_left)
        events.register("after-call.ec2.CreateFleet", self._report_withheld)
        events.register("after-call.ec2.CreateFleet", self._created)
        events.register("after-call.ec2.RunInstances", self._ran)
        events.register("after-call.ec2.TerminateInstances", self._terminated)
        events.register("after-call.ec2.DescribeInstances", self._described)
        events.register("after-call.ec2.DescribeLaunchTemplates", self._templates)
        self.ec2 = session.client("ec2", region_name=self.region)
        return self

    def epoch_time(self, virtual: float) -> datetime:
        return datetime.fromtimestamp(self.loop.epoch + virtual, UTC)

    # ----- hooks ---------------------------------------------------------------------------------
    # ----- capacity errors: CreateFleet answers InsufficientInstanceCapacity for unavailable offerings ----
    def _blocked(self, override: dict[str, Any], capacity_type: str) -> bool:
        itype, zone = override.get("InstanceType", ""), override.get("AvailabilityZone", "")
        return any(t == itype and z in ("*", zone) and c in ("*", capacity_type) for t, z, c in self.unavailable)

    def _withhold(self, params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        """Take the unavailable offerings out of the request (EC2 would not launch them) and remember them
        for the answer's ``Errors`` in the request's own botocore context (the adapter launches groups on
        several threads; nothing about one call is kept where another could read it)."""
        ct = (params.get("TargetCapacitySpecification") or {}).get("DefaultTargetCapacityType", "on-demand")
        withheld: list[dict[str, Any]] = []
        for config in params.get("LaunchTemplateConfigs") or ():
            keep: list[dict[str, Any]] = []
            for ov in config.get("Overrides") or ():
                (withheld if self._blocked(ov, ct) else keep).append(ov)
            config["Overrides"] = keep
        params["LaunchTemplateConfigs"] = [c for c in params.get("LaunchTemplateConfigs") or () if c["Overrides"]]
        context[_WITHHELD] = _Withheld(withheld, ct, all_gone=not params["LaunchTemplateConfigs"])

    def _errors(self, withheld: _Withheld) -> list[dict[str, Any]]:
        self.capacity_errors += len(withheld.overrides)
        return [{"LaunchTemplateAndOverrides": {"Overrides": {"InstanceType": ov.get("InstanceType"),
                                                              "AvailabilityZone": ov.get("AvailabilityZone")}},
                 "Lifecycle": withheld.capacity_type, "ErrorCode": "InsufficientInstanceCapacity",
                 "ErrorMessage": "We currently do not have sufficient capacity in the Availability Zone you "
                                 "requested (simulated)."} for ov in withheld.overrides]

    def _nothing_left(self, context: dict[str, Any], **_: Any) -> tuple[Any, dict[str, Any]] | None:
        withheld: _Withheld | None = context.get(_WITHHELD)
        if withheld is None or not withheld.overrides or not withheld.all_gone:
            return None
        context[_WITHHELD] = None
        return _Http(), {"FleetId": "fleet-ice", "Errors": self._errors(withheld), "Instances": []}

    def _report_withheld(self, parsed: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        withheld: _Withheld | None = context.get(_WITHHELD)
        if withheld is not None and withheld.overrides:
            parsed.setdefault("Errors", []).extend(self._errors(withheld))
            context[_WITHHELD] = None

    def _created(self, parsed: dict[str, Any], **_: Any) -> None:
        ids = [i for group in parsed.get("Instances") or () for i in group.get("InstanceIds") or ()]
        self._launched(ids)

    def _ran(self, parsed: dict[str, Any], **_: Any) -> None:
        self._launched([i["InstanceId"] for i in parsed.get("Instances") or ()])

    def _launched(self, ids: list[str]) -> None:
        fresh = [i for i in ids if i not in self.instances]
        self._calls += 1
        for iid in fresh:
            self.instances[iid] = InstanceRecord(iid, self.loop.now, call=self._calls)
        if fresh:
            # Described once the launching call has returned (moto is not re-entrant per request).
            self.loop.after(0.0, f"observe launch of {len(fresh)}", lambda: self._observe(fresh))

    def _observe(self, ids: list[str]) -> None:
        # Every page: EC2 (and moto) page by reservations even when asked for instance ids, and a large
        # launch spans more than one page.
        pages = self.ec2.get_paginator("describe_instances").paginate(InstanceIds=ids)
        claimed = self.claimed_pods()
        for reservation in (r for page in pages for r in page.get("Reservations") or ()):
            for raw in reservation.get("Instances") or ():
                record = self.instances[raw["InstanceId"]]
                inst = ec2_instance(raw)
                record.instance = inst
                record.pods = frozenset(inst.launch_pods()) | frozenset(claimed.get(inst.instance_id, ()))
                od = self._prices.get(inst.instance_type, 0.0)
                record.hourly_price = spot_price(inst.instance_type, inst.zone, od) if inst.capacity_type == "spot" \
                    else od
                record.duplicate_of = self._duplicated(record)
                if record.duplicate_of:
                    self.duplicates.append(record)
                for callback in self.on_launch:
                    callback(record)

    def _duplicated(self, record: InstanceRecord) -> str | None:
        assert record.instance is not None
        pods = {p for p in record.pods if not self.displaced(p)}
        claim = record.instance.claim_id
        for other in self.instances.values():
            if other is record or not other.alive or other.instance is None or self.leaving(other):
                continue
            # The instances of one grouped CreateFleet carry the group's claim tag; another call under
            # the same claim is a second launch for the same node.
            if claim and other.instance.claim_id == claim and other.call != record.call:
                return other.instance_id
            if pods & other.pods:
                return other.instance_id
        return None

    def _terminated(self, parsed: dict[str, Any], **_: Any) -> None:
        for item in parsed.get("TerminatingInstances") or ():
            record = self.instances.get(item["InstanceId"])
            if record is None or not record.alive:
                continue
            record.terminated_at = self.loop.now
            for callback in self.on_terminate:
                callback(record)

    def _described(self, parsed: dict[str, Any], **_: Any) -> None:
        for reservation in parsed.get("Reservations") or ():
            for raw in reservation.get("Instances") or ():
                record = self.instances.get(raw.get("InstanceId", ""))
                if record is not None:
                    raw["LaunchTime"] = self.epoch_time(record.launched_at)

    def _templates(self, parsed: dict[str, Any], **_: Any) -> None:
        for lt in parsed.get("LaunchTemplates") or ():
            first = self.templates.setdefault(lt["LaunchTemplateId"], self.loop.now)
            lt["CreateTime"] = self.epoch_time(first)

    # ----- faults the scenarios inject -----------------------------------------------------------
    def terminate(self, instance_ids: list[str], *, interrupted: bool = False) -> None:
        """Terminate as EC2 would on its own (a spot reclaim, a scale-in of a managed node group)."""
        if not instance_ids:
            return
        for iid in instance_ids:
            if iid in self.instances:
                self.instances[iid].interrupted = interrupted
        self.ec2.terminate_instances(InstanceIds=instance_ids)

    def live(self) -> list[InstanceRecord]:
        return [r for r in self.instances.values() if r.alive]

    def hourly_cost(self) -> float:
        return sum(r.hourly_price for r in self.instances.values() if r.alive)

    def dollars(self, until: float) -> float:
        return sum(r.cost(until) for r in self.instances.values())
