"""Launching nodes with EC2 CreateFleet (``Type=instant``): overrides are the candidate instance types
x the zones' subnets; insufficient-capacity errors mark the offering unavailable for 3 minutes and
the launch retries with what remains, then falls back to the next capacity type.

``reserved`` (first when the NodePool allows it and the EC2NodeClass selects reservations) launches
into one capacity reservation at a time, best first: its launch template targets the reservation, the
fleet has one override (its type and zone) and asks for no more than it still takes; a full
reservation is skipped until described again, and what is still missing goes on to on-demand / spot."""

from __future__ import annotations

import hashlib
import logging
import random
from dataclasses import dataclass
from typing import Any

from autoscaler.adapters.aws._calls import Caller
from autoscaler.adapters.aws.ami import Ami, AmiResolver, image_for, variant_of
from autoscaler.adapters.aws.catalog import InstanceCatalog
from autoscaler.adapters.aws.launch_template import (
    InstanceProfiles,
    LaunchTemplateRef,
    LaunchTemplates,
    launch_template_data,
)
from autoscaler.adapters.aws.network import NetworkResolver, Subnet
from autoscaler.adapters.aws.reservations import CapacityReservations
from autoscaler.adapters.aws.unavailable import UnavailableOfferings
from autoscaler.adapters.aws.userdata import ClusterInfo, NodeJoin
from autoscaler.adapters.clock import SystemClock
from autoscaler.app.ports import (
    Clock,
    CloudError,
    InsufficientCapacityError,
    ThrottledError,
    UncertainOutcomeError,
)
from autoscaler.domain.fleet import (
    CAPACITY_ERROR_CODES,
    FleetError,
    FleetRequest,
    FleetResult,
    LaunchedInstance,
    supports,
)
from autoscaler.domain.keys import CAPACITY_TYPE_LABEL, NODECLASS_HASH_TAG, NODEPOOL_HASH_TAG, NODEPOOL_LABEL
from autoscaler.domain.models import UNREGISTERED_TAINT, CapacityType, Taint
from autoscaler.domain.ownership import launch_tags
from autoscaler.domain.reservations import RESERVATION_FULL_CODES, CapacityReservation
from autoscaler.domain.spec_hash import node_class_hash

log = logging.getLogger(__name__)

# Labels EC2 decides per instance (it picks the type and zone), so they cannot be baked into user data.
_PER_INSTANCE_LABELS = ("node.kubernetes.io/instance-type", "topology.kubernetes.io/zone",
                        "topology.kubernetes.io/region", "kubernetes.io/hostname", "kubernetes.io/arch",
                        "kubernetes.io/os", "beta.kubernetes.io/", "failure-domain.beta.kubernetes.io/",
                        "karpenter.k8s.aws/instance-")


def client_token(claim_id: str, capacity_type: str, attempt: int) -> str:
    """The CreateFleet idempotency token of one attempt of a launch: deterministic (the same attempt of
    the same claim always sends the same token), distinct per capacity type and attempt (their
    parameters differ, and EC2 rejects a reused token with other parameters), at most 64 ASCII characters."""
    digest = hashlib.sha256(f"{claim_id}/{capacity_type}/{attempt}".encode()).hexdigest()[:40]
    return f"esa-{digest}"


@dataclass(frozen=True, slots=True)
class PreparedLaunch:
    """Everything CreateFleet needs for one request and capacity type, resolved and cached."""

    capacity_type: CapacityType
    templates: dict[str, LaunchTemplateRef]  # Ami.key (architecture/variant) -> template
    images: tuple[Ami, ...]
    subnets: dict[str, Subnet]  # zone -> subnet
    reservation: CapacityReservation | None = None  # capacity type ``reserved``: the one it launches into


def _join_labels(request: FleetRequest, capacity_type: str,
                 reservation: CapacityReservation | None = None) -> dict[str, str]:
    labels = {k: v for k, v in request.labels.items() if not k.startswith(_PER_INSTANCE_LABELS)}
    labels[NODEPOOL_LABEL] = request.node_pool
    labels[CAPACITY_TYPE_LABEL] = capacity_type
    if reservation is not None:
        labels.update(reservation.labels)
    return labels


def _join_taints(request: FleetRequest) -> tuple[Taint, ...]:
    out: list[Taint] = []
    for t in (*request.taints, *request.startup_taints, UNREGISTERED_TAINT):
        if t not in out:
            out.append(t)
    return tuple(out)


def drift_tags(request: FleetRequest) -> dict[str, str]:
    """The hashes drift is judged by, on every instance launched (docs/disruption.md, Drift)."""
    tags = {NODECLASS_HASH_TAG: node_class_hash(request.node_class)}
    if request.node_pool_hash:
        tags[NODEPOOL_HASH_TAG] = request.node_pool_hash
    return tags


# A throttled CreateFleet (RequestLimitExceeded, HTTP 503, after botocore's own retries) is one EC2 never
# acted on: it is sent again with the same token, after a full-jitter exponential backoff, for at most this
# long (within the 8 s the provisioner keeps for a launch it starts: LAUNCH_RESERVE_SECONDS).
THROTTLE_RETRY_SECONDS = 5.0
_THROTTLE_BASE_SECONDS, _THROTTLE_CAP_SECONDS = 0.25, 2.0


class FleetLauncher:
    def __init__(
        self, ec2: Any, *, cluster: ClusterInfo, catalog: InstanceCatalog, network: NetworkResolver,
        amis: AmiResolver, templates: LaunchTemplates, profiles: InstanceProfiles,
        unavailable: UnavailableOfferings, max_attempts: int = 3,
        reservations: CapacityReservations | None = None, clock: Clock | None = None,
        throttle_retry_seconds: float = THROTTLE_RETRY_SECONDS, rng: random.Random | None = None,
    ) -> None:
        self._ec2 = Caller(ec2)
        self._cluster = cluster
        self._catalog = catalog
        self._network = network
        self._amis = amis
        self._templates = templates
        self._profiles = profiles
        self.unavailable = unavailable
        self._max_attempts = max_attempts
        self.reservations = reservations
        self._clock: Clock = clock or SystemClock()
        self.throttle_retry_seconds = throttle_retry_seconds
        self._rng = rng or random.Random()

    @property
    def calls(self) -> dict[str, int]:
        return dict(self._ec2.calls)

    def prepare(self, request: FleetRequest, capacity_type: CapacityType,
                reservation: CapacityReservation | None = None) -> PreparedLaunch:
        """Resolve subnets, security groups, AMIs and instance profile; ensure the launch templates."""
        nc = request.node_class
        subnets = self._network.subnets_by_zone(nc.subnet_selector_terms, node_class=nc.name)
        if request.zones:
            subnets = {z: s for z, s in subnets.items() if z in request.zones}
        groups = self._network.security_groups(nc.security_group_selector_terms, node_class=nc.name)
        profile = self._profiles.for_node_class(nc)
        join = NodeJoin(labels=_join_labels(request, capacity_type, reservation), taints=_join_taints(request),
                        kubelet=request.kubelet or nc.kubelet)
        types = self._catalog.instance_types()
        candidates = [types[t] for t in request.instance_types_for(capacity_type) if t in types]
        images = tuple(self._amis.resolve(nc, {variant_of(it) for it in candidates}).values())
        templates: dict[str, LaunchTemplateRef] = {}
        for ami in {a.key: a for it in candidates if (a := image_for(images, it)) is not None}.values():
            data = launch_template_data(node_class=nc, ami=ami, cluster=self._cluster, join=join,
                                        security_group_ids=groups, instance_profile=profile)
            if reservation is not None:
                data["CapacityReservationSpecification"] = {
                    "CapacityReservationTarget": {"CapacityReservationId": reservation.reservation_id}}
            templates[ami.key] = self._templates.ensure(data, node_class=nc, architecture=ami.architecture)
        return PreparedLaunch(capacity_type=capacity_type, templates=templates, subnets=subnets, images=images,
                              reservation=reservation)

    def _overrides(self, request: FleetRequest, prepared: PreparedLaunch) -> dict[str, list[dict[str, Any]]]:
        """Image key -> overrides (type x zone) still worth trying, in the request's type order."""
        types = self._catalog.instance_types()
        out: dict[str, list[dict[str, Any]]] = {}
        ct = prepared.capacity_type
        for name in request.instance_types_for(ct):
            it = types.get(name)
            ami = image_for(prepared.images, it) if it is not None else None
            if it is None or ami is None or ami.key not in prepared.templates or not supports(it, ct):
                continue
            zones = self._catalog.zones_of(name)
            for zone, subnet in sorted(prepared.subnets.items()):
                if zone in zones and not self.unavailable.is_unavailable(name, zone, ct):
                    out.setdefault(ami.key, []).append(
                        {"InstanceType": name, "SubnetId": subnet.subnet_id, "AvailabilityZone": zone}
                    )
        return out

    def launch(self, request: FleetRequest) -> FleetResult:
        """Launch ``request.count`` nodes. Never raises for capacity problems: the result lists what
        launched and, for everything else, why not. Configuration errors (no subnet, no AMI) raise."""
        result = FleetResult(requested=request.count)
        for ct in request.capacity_types:
            if ct == "reserved":
                self._launch_reserved(request, result)
                if result.complete or result.uncertain:
                    return result
                continue
            prepared = self.prepare(request, ct)
            for attempt in range(self._max_attempts):
                if result.complete:
                    return result
                overrides = self._overrides(request, prepared)
                if not overrides:
                    result.errors.append(FleetError(
                        code="NoOfferingsLeft", capacity_type=ct,
                        message=(f"no {ct} offering of {', '.join(request.instance_types_for(ct))} is left to try in "
                                 f"zones {', '.join(sorted(prepared.subnets)) or '(none)'}"),
                    ))
                    break
                token = client_token(request.claim_id, ct, attempt)
                if not self._create_fleet(request, prepared, overrides, result, token=token):
                    break  # an error retrying cannot fix
            if result.complete or result.uncertain:
                # Uncertain: EC2 may have launched for that token. Another token (the next capacity
                # type) could launch the same nodes twice; the claims' reconciliation settles it.
                return result
        return result

    def _launch_reserved(self, request: FleetRequest, result: FleetResult) -> None:
        """Launch what ``result`` still misses into the node class's reservations, best first; each is
        tried once (a full one is marked so and the next is tried)."""
        nc = request.node_class
        if self.reservations is None or not nc.capacity_reservation_selector_terms:
            return
        subnets = self._network.subnets_by_zone(nc.subnet_selector_terms, node_class=nc.name)
        zones = [z for z in subnets if not request.zones or z in request.zones]
        tried: set[str] = set()
        while not result.complete:
            left = [r for r in self.reservations.candidates(nc, instance_types=request.instance_types, zones=zones)
                    if r.reservation_id not in tried]
            if not left:
                result.errors.append(FleetError(
                    code="NoReservedCapacityLeft", capacity_type="reserved",
                    message=(f"no capacity reservation selected by EC2NodeClass {nc.name} has room for "
                             f"{', '.join(request.instance_types)} in zones {', '.join(sorted(zones)) or '(none)'}")))
                return
            reservation = left[0]
            tried.add(reservation.reservation_id)
            prepared = self.prepare(request, "reserved", reservation)
            types = self._catalog.instance_types()
            it = types.get(reservation.instance_type)
            ami = image_for(prepared.images, it) if it is not None else None
            subnet = prepared.subnets.get(reservation.zone)
            if ami is None or ami.key not in prepared.templates or subnet is None:
                continue
            overrides = {ami.key: [{"InstanceType": reservation.instance_type, "SubnetId": subnet.subnet_id,
                                    "AvailabilityZone": reservation.zone}]}
            target = min(result.missing, self.reservations.remaining(reservation.reservation_id))
            before, errors = len(result.launched), len(result.errors)
            token = client_token(request.claim_id, f"reserved/{reservation.reservation_id}", 0)
            self._create_fleet(request, prepared, overrides, result, token=token, target=target)
            self.reservations.mark_launched(reservation.reservation_id, len(result.launched) - before)
            if any(e.code in RESERVATION_FULL_CODES for e in result.errors[errors:]):
                self.reservations.mark_full(reservation.reservation_id)
            if result.uncertain:
                return

    def _create_fleet(
        self, request: FleetRequest, prepared: PreparedLaunch,
        overrides: dict[str, list[dict[str, Any]]], result: FleetResult, *, token: str, target: int | None = None,
    ) -> bool:
        """One CreateFleet call for ``target`` nodes (default: all still missing); returns whether a retry
        could help (capacity errors only)."""
        ct = prepared.capacity_type
        tags = launch_tags(cluster_name=self._cluster.name, node_pool=request.node_pool,
                           node_class=request.node_class.name, claim_id=request.claim_id,
                           extra={**request.node_class.tags, **request.tags, **drift_tags(request)})
        tag_list = [{"Key": k, "Value": v} for k, v in sorted(tags.items())]
        params: dict[str, Any] = {
            # EC2 answers a repeated token with the fleet it already launched: botocore's own retry of a
            # request whose response was lost can never launch twice.
            "ClientToken": token,
            "Type": "instant",
            # A reservation is on-demand capacity the launch template targets.
            "TargetCapacitySpecification": {"TotalTargetCapacity": result.missing if target is None else target,
                                            "DefaultTargetCapacityType": "on-demand" if ct == "reserved" else ct},
            "LaunchTemplateConfigs": [
                {"LaunchTemplateSpecification": {"LaunchTemplateId": prepared.templates[arch].template_id,
                                                 "Version": "$Latest"},
                 "Overrides": ovs}
                for arch, ovs in sorted(overrides.items())
            ],
            "TagSpecifications": [{"ResourceType": r, "Tags": tag_list} for r in ("instance", "volume", "fleet")],
        }
        if ct == "spot":
            params["SpotOptions"] = {"AllocationStrategy": "price-capacity-optimized"}
        else:
            params["OnDemandOptions"] = {"AllocationStrategy": "lowest-price"}
        try:
            resp = self._send_create_fleet(params)
        except CloudError as exc:
            code = exc.code
            # A capacity error is EC2 saying it launched nothing; no answer or a server error is not. A
            # throttle (EC2's RequestLimitExceeded comes with HTTP 503) is EC2 refusing before acting.
            uncertain = not isinstance(exc, InsufficientCapacityError | ThrottledError) and not exc.throttled and (
                isinstance(exc, UncertainOutcomeError) or code == "IdempotentParameterMismatch"
                or exc.status >= 500 or exc.status == 0)
            result.errors.append(FleetError(code=code, capacity_type=ct, message=str(exc), uncertain=uncertain))
            if code not in CAPACITY_ERROR_CODES:
                return False
            # A capacity error for the whole request (e.g. an account vCPU quota): none of these
            # offerings is worth retrying now, but the next capacity type may still work.
            self._mark_all(overrides, ct)
            return True
        zone_of_subnet = {s.subnet_id: z for z, s in prepared.subnets.items()}
        for inst in resp.get("Instances", ()):
            ov = (inst.get("LaunchTemplateAndOverrides") or {}).get("Overrides") or {}
            zone = ov.get("AvailabilityZone") or zone_of_subnet.get(ov.get("SubnetId", ""), "")
            lifecycle: CapacityType = "spot" if inst.get("Lifecycle") == "spot" else (
                "reserved" if ct == "reserved" else "on-demand")
            for iid in inst.get("InstanceIds", ()):
                result.launched.append(LaunchedInstance(
                    instance_id=iid, instance_type=str(inst.get("InstanceType") or ov.get("InstanceType", "")),
                    zone=zone, capacity_type=lifecycle, claim_id=request.claim_id,
                ))
        retry = False
        for err in resp.get("Errors", ()):
            ov = (err.get("LaunchTemplateAndOverrides") or {}).get("Overrides") or {}
            zone = ov.get("AvailabilityZone") or zone_of_subnet.get(ov.get("SubnetId", ""), "")
            fe = FleetError(code=str(err.get("ErrorCode", "")), message=str(err.get("ErrorMessage", "")),
                            instance_type=str(ov.get("InstanceType", "")), zone=zone,
                            capacity_type=str(err.get("Lifecycle") or ct))
            result.errors.append(fe)
            if fe.is_capacity_error:
                retry = True
                if fe.instance_type and fe.zone:
                    self.unavailable.mark(fe.instance_type, fe.zone, ct)
                else:
                    # EC2 did not say which offering: none of this call's overrides is worth retrying now.
                    self._mark_all(overrides, ct)
        return self._log_launched(request, result, retry)

    def _send_create_fleet(self, params: dict[str, Any]) -> dict[str, Any]:
        """CreateFleet, sent again while EC2 throttles it (same token: nothing was launched for it), with
        full-jitter exponential backoff, until ``throttle_retry_seconds`` would be passed; then the
        throttle is raised. Any other error is raised at once."""
        give_up = self._clock.monotonic() + self.throttle_retry_seconds
        ceiling = _THROTTLE_BASE_SECONDS
        while True:
            try:
                return self._ec2("create_fleet", **params)
            except CloudError as exc:
                wait = self._rng.uniform(0.0, ceiling)
                if not (isinstance(exc, ThrottledError) or exc.throttled) or self._clock.monotonic() + wait > give_up:
                    raise
                log.info("CreateFleet throttled (%s); sent again in %.2f s with the same token", exc.code, wait)
                self._clock.sleep(wait)
                ceiling = min(ceiling * 2, _THROTTLE_CAP_SECONDS)

    def _mark_all(self, overrides: dict[str, list[dict[str, Any]]], capacity_type: str) -> None:
        for ovs in overrides.values():
            for o in ovs:
                self.unavailable.mark(o["InstanceType"], o["AvailabilityZone"], capacity_type)

    @staticmethod
    def _log_launched(request: FleetRequest, result: FleetResult, retry: bool) -> bool:
        if result.launched:
            log.info("launched %s for %s", [i.instance_id for i in result.launched], request.claim_id)
        return retry
