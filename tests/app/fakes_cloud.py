"""``FakeCloud``: an in-memory ``CloudPort`` for service tests (Karpenter's ``fake/cloudprovider.go``: a stateful
fake that records calls and takes the next error), held to ``AwsCloud``'s contract on moto by
``tests/adapters/contract/test_cloud_port_contract.py`` (the same test functions run against both).

It is as strict as EC2 where the product depends on it: instance types and zone offerings are moto's real EC2
data; a launch is answered per client token (the same claim, capacity type and attempt sent again launches
nothing new, as EC2's idempotency does); an offering without capacity fails with EC2's error code and goes
into the 3-minute capacity-error cache; termination refuses, all or nothing, any instance without this
cluster's ownership tags; a terminated instance is ``shutting-down``, not gone; a node class whose selector
terms select no subnet or security group is a ``ConfigError``.
"""

from __future__ import annotations

import functools
import itertools
from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from autoscaler.adapters.aws.fleet import drift_tags
from autoscaler.adapters.aws.unavailable import UnavailableOfferings
from autoscaler.adapters.clock import ManualClock
from autoscaler.app.ports import CloudError, InsufficientCapacityError, ThrottledError, UncertainOutcomeError
from autoscaler.domain.catalogue_needs import CatalogueNeeds
from autoscaler.domain.errors import ConfigError
from autoscaler.domain.fleet import (
    CAPACITY_ERROR_CODES,
    CloudInstance,
    FleetError,
    FleetRequest,
    FleetResult,
    LaunchedInstance,
    LaunchTemplateInfo,
    ResolvedNodeClass,
    instance_from_ec2,
    supports,
)
from autoscaler.domain.instance_types import instance_type_from_ec2
from autoscaler.domain.keys import MANAGED_BY_TAG, NODECLAIM_TAG
from autoscaler.domain.models import CapacityType, InstanceType, Offering
from autoscaler.domain.nodeclass import NodeClass, SelectorTerm
from autoscaler.domain.ownership import (
    OwnershipError,
    cluster_tag,
    launch_tags,
    launched_by_karpenter,
    ownership_problem,
)
from autoscaler.domain.reservations import CapacityReservation
from simulator.local import REGION, ZONES, moto_catalog, on_demand_prices, spot_price

LIVE_STATES = ("pending", "running")
ATTEMPTS = 3  # CreateFleet calls per capacity type, as the adapter makes them
DISCOVERY = "karpenter.sh/discovery"


@functools.cache
def _catalog() -> tuple[dict[str, InstanceType], dict[str, frozenset[str]]]:
    """moto's EC2 instance types (parsed as the adapter parses them) and the zones offering each."""
    infos, offerings = moto_catalog(REGION)
    types = {it.name: it for info in infos if (it := instance_type_from_ec2(dict(info))) is not None}
    zones: dict[str, set[str]] = {}
    for offering in offerings:
        zones.setdefault(str(offering["InstanceType"]), set()).add(str(offering["Location"]))
    return types, {name: frozenset(z) for name, z in zones.items() if name in types}


@dataclass(frozen=True)
class FakeSubnet:
    subnet_id: str
    zone: str
    tags: Mapping[str, str]


def _matches(term: SelectorTerm, resource_id: str, tags: Mapping[str, str]) -> bool:
    """A subnet / security-group selector term as EC2's filters evaluate it (``*``: any value)."""
    if term.id:
        return term.id == resource_id
    if term.name and tags.get("Name") != term.name:
        return False
    return all(key in tags and value in ("*", tags[key]) for key, value in (term.tags or {}).items())


@dataclass
class FakeCloud:
    """The region's state (``instances``, by id) and the test hooks: ``calls`` per method, ``launches`` (every
    FleetRequest), ``insufficient`` (offerings EC2 has no capacity for), ``next_create_fleet_error`` (the next
    CreateFleet fails so; an ``UncertainOutcomeError`` is EC2 acting and the answer being lost)."""

    cluster_name: str = "prod"
    clock: ManualClock = field(default_factory=ManualClock)
    zones: tuple[str, ...] = ZONES
    adopt_karpenter: bool = False
    subnets: list[FakeSubnet] = field(default_factory=list)
    security_groups: dict[str, Mapping[str, str]] = field(default_factory=dict)  # id -> tags
    images: frozenset[str] = frozenset({"ami-0fake00000000amd64", "ami-0fake00000000arm64"})
    reservations: list[CapacityReservation] = field(default_factory=list)
    stale_prices: bool = False
    only_types: frozenset[str] | None = None  # the catalogue cut down to these types (a faster planner)
    insufficient: set[tuple[str, str, str]] = field(default_factory=set)
    next_create_fleet_error: CloudError | None = None
    instances: dict[str, CloudInstance] = field(default_factory=dict)
    calls: Counter[str] = field(default_factory=Counter)
    launches: list[FleetRequest] = field(default_factory=list)
    templates: dict[str, LaunchTemplateInfo] = field(default_factory=dict)
    _answers: dict[tuple[str, str, int], tuple[list[LaunchedInstance], list[FleetError]]] = field(default_factory=dict)
    _template_used: dict[str, float] = field(default_factory=dict)
    _protected: set[str] = field(default_factory=set)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    expected: CatalogueNeeds | None = None  # the NodePools' needs the last pass named (expect_catalogue)

    def __post_init__(self) -> None:
        if not self.subnets:
            self.subnets = [FakeSubnet(f"subnet-0fake{i:012d}", zone, {DISCOVERY: self.cluster_name})
                            for i, zone in enumerate(self.zones)]
        if not self.security_groups:
            self.security_groups = {"sg-0fake000000000001": {DISCOVERY: self.cluster_name}}
        self._unavailable = UnavailableOfferings(self.clock)
        types, offered = _catalog()
        keep = self.only_types
        self._types = {n: t for n, t in types.items() if keep is None or n in keep}
        self._offered = {n: z for n, z in offered.items() if n in self._types}
        self._on_demand = on_demand_prices(REGION)

    # ----- test hooks --------------------------------------------------------------------------
    def run_instance(self, instance_type: str = "m5.large", zone: str = "us-east-1a", *,
                     tags: Mapping[str, str] | None = None, state: str = "running",
                     capacity_type: CapacityType = "on-demand") -> CloudInstance:
        """An instance someone else launched (a managed node group's, Karpenter's, another cluster's)."""
        return self._start(instance_type, zone, capacity_type, dict(tags or {}), state=state)

    def protect(self, instance_id: str) -> None:
        """Turn on the instance's termination protection (``DisableApiTermination``)."""
        self._protected.add(instance_id)

    def reclaim(self, instance_id: str) -> None:
        """EC2 takes the instance (a spot reclaim, a failed host): it is ``terminated``."""
        self.instances[instance_id] = replace(self.instances[instance_id], state="terminated")

    def add_template(self, name: str, *, created_at: float, used_at: float | None = None) -> str:
        """A launch template this cluster's autoscaler created (``used_at``: when this container last launched
        with it)."""
        template_id = f"lt-0fake{len(self.templates):012d}"
        self.templates[template_id] = LaunchTemplateInfo(name=name, template_id=template_id, created_at=created_at)
        if used_at is not None:
            self._template_used[name] = used_at
        return template_id

    def reset(self) -> None:
        """Forget calls, launches and the pending error (the region keeps its instances)."""
        self.calls.clear()
        self.launches.clear()
        self.next_create_fleet_error = None

    def _start(self, instance_type: str, zone: str, capacity_type: CapacityType, tags: dict[str, str], *,
               state: str = "pending") -> CloudInstance:
        number = next(self._ids)
        subnet = next((s.subnet_id for s in self.subnets if s.zone == zone), "")
        raw: dict[str, Any] = {
            "InstanceId": f"i-{number:017x}", "InstanceType": instance_type, "Placement": {"AvailabilityZone": zone},
            "State": {"Name": state}, "LaunchTime": datetime.fromtimestamp(self.clock.now(), UTC),
            "Tags": [{"Key": k, "Value": v} for k, v in sorted(tags.items())],
            "PrivateDnsName": f"ip-10-0-{number // 250}-{number % 250}.ec2.internal", "SubnetId": subnet,
            "ImageId": min(self.images), "SecurityGroups": [{"GroupId": g} for g in sorted(self.security_groups)],
            **({"InstanceLifecycle": "spot"} if capacity_type == "spot" else {}),
        }
        instance = instance_from_ec2(raw)
        self.instances[instance.instance_id] = instance
        return instance

    # ----- catalogue and prices ----------------------------------------------------------------
    def instance_types(self) -> Mapping[str, InstanceType]:
        self.calls["instance_types"] += 1
        return dict(self._types)

    def expect_catalogue(self, needs: CatalogueNeeds) -> None:
        """The fake's catalogue is never stale: the needs are recorded (``expected``), nothing is read."""
        self.calls["expect_catalogue"] += 1
        self.expected = needs

    def offerings(self) -> list[Offering]:
        self.calls["offerings"] += 1
        blocked = self._unavailable.snapshot()
        out: list[Offering] = []
        for name, zones in sorted(self._offered.items()):
            it = self._types[name]
            for zone in sorted(zones):
                od = self._on_demand.get(name)
                priced: list[tuple[CapacityType, float | None]] = [
                    ("on-demand", od), ("spot", spot_price(name, zone, od) if od is not None else None)]
                out.extend(Offering(instance_type=name, zone=zone, capacity_type=ct, price=price,
                                    available=(name, zone, ct) not in blocked)
                           for ct, price in priced if price is not None and supports(it, ct))
        return out

    def unavailable(self) -> frozenset[tuple[str, str, str]]:
        return self._unavailable.snapshot()

    @property
    def prices_stale(self) -> bool:
        return self.stale_prices

    def mark_unavailable(self, instance_type: str, zone: str, capacity_type: str) -> None:
        self.calls["mark_unavailable"] += 1
        self._unavailable.mark(instance_type, zone, capacity_type)

    # ----- node classes ------------------------------------------------------------------------
    def _subnets(self, node_class: NodeClass) -> list[FakeSubnet]:
        found = [s for s in self.subnets
                 if any(_matches(t, s.subnet_id, s.tags) for t in node_class.subnet_selector_terms)]
        if not found:
            raise ConfigError(f"EC2NodeClass {node_class.name}: spec.subnetSelectorTerms match no subnet")
        return found

    def _groups(self, node_class: NodeClass) -> list[str]:
        found = [g for g, tags in sorted(self.security_groups.items())
                 if any(_matches(t, g, tags) for t in node_class.security_group_selector_terms)]
        if not found:
            raise ConfigError(f"EC2NodeClass {node_class.name}: spec.securityGroupSelectorTerms match no "
                              "security group")
        return found

    def subnet_zones(self, node_class: NodeClass) -> frozenset[str]:
        self.calls["subnet_zones"] += 1
        return frozenset(s.zone for s in self._subnets(node_class))

    def resolve_node_class(self, node_class: NodeClass) -> ResolvedNodeClass:
        self.calls["resolve_node_class"] += 1
        return ResolvedNodeClass(amis=self.images, subnets=frozenset(s.subnet_id for s in self._subnets(node_class)),
                                 security_groups=frozenset(self._groups(node_class)))

    def capacity_reservations(self, node_class: NodeClass) -> list[CapacityReservation]:
        self.calls["capacity_reservations"] += 1
        wanted = {t.id for t in node_class.capacity_reservation_selector_terms if t.id}
        return [r for r in self.reservations if r.reservation_id in wanted and r.usable(self.clock.now())]

    def describe_capacity_reservations(self, reservation_ids: Iterable[str]) -> list[CapacityReservation]:
        self.calls["describe_capacity_reservations"] += 1
        wanted = set(reservation_ids)
        return [r for r in self.reservations if r.reservation_id in wanted]

    # ----- launching ---------------------------------------------------------------------------
    def launch(self, request: FleetRequest) -> FleetResult:
        self.calls["launch"] += 1
        self.launches.append(request)
        zones = {s.zone for s in self._subnets(request.node_class)}
        self._groups(request.node_class)
        if request.zones:
            zones &= set(request.zones)
        result = FleetResult(requested=request.count)
        for ct in request.capacity_types:
            if ct == "reserved":
                # No reservation launches here: what the node class selects is reported as full.
                result.errors.append(FleetError(code="NoReservedCapacityLeft", capacity_type="reserved",
                                                message="the fake launches into no capacity reservation"))
                continue
            for attempt in range(ATTEMPTS):
                if result.complete:
                    return result
                candidates = [(name, zone) for name in request.instance_types_for(ct)
                              if name in self._types and supports(self._types[name], ct)
                              for zone in sorted(zones & self._offered.get(name, frozenset()))
                              if not self._unavailable.is_unavailable(name, zone, ct)]
                if not candidates:
                    result.errors.append(FleetError(code="NoOfferingsLeft", capacity_type=ct, message=(
                        f"no {ct} offering of {', '.join(request.instance_types_for(ct))} is left to try")))
                    break
                launched, errors = self._create_fleet(request, ct, attempt, candidates, result.missing)
                result.launched.extend(launched)
                result.errors.extend(errors)
                for error in errors:
                    if error.is_capacity_error and error.instance_type and error.zone:
                        self._unavailable.mark(error.instance_type, error.zone, ct)
                if not any(e.is_capacity_error for e in errors) or any(e.uncertain for e in errors):
                    break
            if result.complete or result.uncertain:
                return result
        return result

    def _create_fleet(self, request: FleetRequest, ct: CapacityType, attempt: int,
                      candidates: list[tuple[str, str]], count: int) -> tuple[list[LaunchedInstance], list[FleetError]]:
        """One CreateFleet: answered from its client token when sent before (nothing new is launched)."""
        token = (request.claim_id, ct, attempt)
        if token in self._answers:
            return self._answers[token]
        self.calls["create_fleet"] += 1
        error, self.next_create_fleet_error = self.next_create_fleet_error, None
        if error is not None and not isinstance(error, UncertainOutcomeError):
            # EC2 refused before acting: a capacity error for the whole request takes every offering asked
            # out for 3 minutes; a server error or no answer leaves the outcome open (the adapter's rule).
            uncertain = not isinstance(error, InsufficientCapacityError | ThrottledError) and not error.throttled \
                and (error.code == "IdempotentParameterMismatch" or error.status >= 500 or error.status == 0)
            if error.code in CAPACITY_ERROR_CODES:
                for name, zone in candidates:
                    self._unavailable.mark(name, zone, ct)
            return [], [FleetError(code=error.code, capacity_type=ct, message=str(error), uncertain=uncertain)]
        errors = [FleetError(code="InsufficientInstanceCapacity", capacity_type=ct, instance_type=name, zone=zone,
                             message=f"There is no {ct} capacity for {name} in {zone}.")
                  for name, zone in candidates if (name, zone, ct) in self.insufficient]
        left = [(name, zone) for name, zone in candidates if (name, zone, ct) not in self.insufficient]
        launched: list[LaunchedInstance] = []
        if left:
            # Lowest price first, as both allocation strategies lean (the request's order breaks ties).
            name, zone = min(left, key=lambda o: (self._price(o[0], o[1], ct), left.index(o)))
            tags = launch_tags(cluster_name=self.cluster_name, node_pool=request.node_pool,
                               node_class=request.node_class.name, claim_id=request.claim_id,
                               extra={**request.node_class.tags, **request.tags, **drift_tags(request)})
            for _ in range(count):
                instance = self._start(name, zone, ct, tags)
                launched.append(LaunchedInstance(instance_id=instance.instance_id, instance_type=name, zone=zone,
                                                 capacity_type=ct, claim_id=request.claim_id))
            self._used_template(request.node_class.name)
        answer = (launched, errors)
        self._answers[token] = answer
        if error is not None:  # EC2 acted; its answer was lost
            return [], [FleetError(code=error.code, capacity_type=ct, message=str(error), uncertain=True)]
        return answer

    def _price(self, name: str, zone: str, ct: str) -> float:
        od = self._on_demand.get(name, float("inf"))
        return spot_price(name, zone, od) if ct == "spot" and od != float("inf") else od

    def _used_template(self, node_class: str) -> None:
        name = f"eks-serverless-autoscaler/{self.cluster_name}/{node_class}"
        if name not in {t.name for t in self.templates.values()}:
            self.add_template(name, created_at=self.clock.now())
        self._template_used[name] = self.clock.now()

    # ----- instances ---------------------------------------------------------------------------
    def _owned(self) -> list[CloudInstance]:
        return sorted((i for i in self.instances.values() if i.state in LIVE_STATES
                       and i.tags.get(MANAGED_BY_TAG) == self.cluster_name
                       and i.tags.get(cluster_tag(self.cluster_name)) == "owned"), key=lambda i: i.instance_id)

    def owned_instances(self) -> list[CloudInstance]:
        self.calls["owned_instances"] += 1
        return self._owned()

    def in_flight(self, registered_instance_ids: Collection[str]) -> list[CloudInstance]:
        self.calls["in_flight"] += 1
        return [i for i in self._owned() if i.instance_id not in registered_instance_ids]

    def claimed_instances(self, claim_ids: Collection[str]) -> list[CloudInstance]:
        self.calls["claimed_instances"] += 1
        wanted = set(claim_ids)
        return [i for i in self._owned() if i.tags.get(NODECLAIM_TAG) in wanted]

    def karpenter_instances(self) -> list[CloudInstance]:
        self.calls["karpenter_instances"] += 1
        return sorted((i for i in self.instances.values() if i.state in LIVE_STATES
                       and launched_by_karpenter(i.tags, self.cluster_name)), key=lambda i: i.instance_id)

    def describe_instances(self, instance_ids: Iterable[str]) -> list[CloudInstance]:
        self.calls["describe_instances"] += 1
        return [self.instances[i] for i in sorted(set(instance_ids)) if i in self.instances]

    def terminate(self, instance_ids: Iterable[str]) -> list[str]:
        self.calls["terminate"] += 1
        found = [self.instances[i] for i in sorted(set(instance_ids)) if i in self.instances]
        for instance in found:
            problem = ownership_problem(instance.tags, self.cluster_name, adopt_karpenter=self.adopt_karpenter)
            if problem is not None:
                raise OwnershipError(instance.instance_id, problem)
        ids = [i.instance_id for i in found if i.state not in ("terminated", "shutting-down")]
        if protected := [iid for iid in ids if iid in self._protected]:
            # EC2 fails the call; of the others, those in a zone with a protected one stay, the rest go
            # (TerminateInstances' documented rule).
            held = {self.instances[iid].zone for iid in protected}
            for iid in ids:
                if self.instances[iid].zone not in held:
                    self.instances[iid] = replace(self.instances[iid], state="shutting-down")
            raise CloudError(f"terminate_instances: OperationNotPermitted: The instance '{protected[0]}' may not be "
                             "terminated. Modify its 'disableApiTermination' instance attribute and try again.",
                             operation="terminate_instances", code="OperationNotPermitted", status=400)
        for iid in ids:
            self.instances[iid] = replace(self.instances[iid], state="shutting-down")
        return ids

    # ----- launch templates --------------------------------------------------------------------
    def launch_templates(self) -> list[LaunchTemplateInfo]:
        self.calls["launch_templates"] += 1
        return sorted(self.templates.values(), key=lambda t: t.name)

    def launch_template_last_used(self, name: str) -> float | None:
        return self._template_used.get(name)

    def delete_launch_template(self, template_id: str) -> bool:
        self.calls["delete_launch_template"] += 1
        return self.templates.pop(template_id, None) is not None
