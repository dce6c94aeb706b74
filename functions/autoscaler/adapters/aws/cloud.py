"""``AwsCloud``: the ``CloudPort`` facade over the EC2, SSM, Pricing and IAM adapters. Build it once per
Lambda container (``AwsCloud.from_session``); its caches are what make warm invocations cheap."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from autoscaler.adapters.aws._calls import client_config, use_fast_timestamps
from autoscaler.adapters.aws.ami import AmiResolver
from autoscaler.adapters.aws.catalog import CATALOG_TTL_SECONDS, InstanceCatalog
from autoscaler.adapters.aws.fleet import FleetLauncher, PreparedLaunch
from autoscaler.adapters.aws.instances import Instances
from autoscaler.adapters.aws.launch_template import InstanceProfiles, LaunchTemplates
from autoscaler.adapters.aws.network import NetworkResolver
from autoscaler.adapters.aws.pricing import PriceBook
from autoscaler.adapters.aws.reservations import CapacityReservations
from autoscaler.adapters.aws.unavailable import UnavailableOfferings
from autoscaler.adapters.aws.userdata import ClusterInfo
from autoscaler.adapters.clock import SystemClock
from autoscaler.app.ports import Clock, CloudPort
from autoscaler.domain.catalogue_needs import CatalogueNeeds
from autoscaler.domain.fleet import (
    CloudInstance,
    FleetRequest,
    FleetResult,
    LaunchTemplateInfo,
    ResolvedNodeClass,
    supports,
)
from autoscaler.domain.models import CapacityType, InstanceType, Offering
from autoscaler.domain.nodeclass import NodeClass
from autoscaler.domain.reservations import CapacityReservation

# The Price List API answers in a few regions only; us-east-1 serves every region's prices.
PRICING_REGION = "us-east-1"


class AwsCloud:
    """Implements ``autoscaler.app.ports.CloudPort`` with injected boto3 clients (no call at construction)."""

    def __init__(
        self, *, ec2: Any, ssm: Any, pricing: Any, iam: Any, region: str, cluster: ClusterInfo,
        clock: Clock | None = None, catalog_ttl: float = CATALOG_TTL_SECONDS, adopt_karpenter: bool = False,
        instance_profile: str | None = None,
    ) -> None:
        self.clock: Clock = clock or SystemClock()
        self.region = region
        self.cluster = cluster
        self.catalog = InstanceCatalog(ec2, clock=self.clock, ttl=catalog_ttl)
        self.prices = PriceBook(pricing=pricing, ec2=ec2, region=region, clock=self.clock)
        self.network = NetworkResolver(ec2, clock=self.clock)
        self.amis = AmiResolver(ssm=ssm, ec2=ec2, k8s_version=cluster.k8s_version, clock=self.clock)
        self.templates = LaunchTemplates(ec2, cluster=cluster, clock=self.clock)
        self.profiles = InstanceProfiles(iam, cluster_name=cluster.name, deployed=instance_profile)
        self.unavailable_offerings = UnavailableOfferings(self.clock)
        self.reservations = CapacityReservations(ec2, clock=self.clock)
        self.fleet = FleetLauncher(ec2, cluster=cluster, catalog=self.catalog, network=self.network, amis=self.amis,
                                   templates=self.templates, profiles=self.profiles,
                                   unavailable=self.unavailable_offerings, reservations=self.reservations,
                                   clock=self.clock)
        self.instances = Instances(ec2, cluster_name=cluster.name, adopt_karpenter=adopt_karpenter)
        # The last offerings and the inputs they were built from (copies, compared by value).
        self._offerings: tuple[tuple[object, ...], list[Offering]] | None = None

    @classmethod
    def from_session(
        cls, session: Any, *, region: str, cluster: ClusterInfo, clock: Clock | None = None, max_attempts: int = 5,
        adopt_karpenter: bool = False, instance_profile: str | None = None,
    ) -> AwsCloud:
        """Clients from a boto3 Session with bounded adaptive retries (and fast timestamp parsing)."""
        cfg = client_config(max_attempts=max_attempts)
        use_fast_timestamps(session)
        return cls(
            ec2=session.client("ec2", region_name=region, config=cfg),
            ssm=session.client("ssm", region_name=region, config=cfg),
            pricing=session.client("pricing", region_name=PRICING_REGION, config=cfg),
            iam=session.client("iam", config=cfg),
            region=region, cluster=cluster, clock=clock, adopt_karpenter=adopt_karpenter,
            instance_profile=instance_profile,
        )

    @property
    def calls(self) -> dict[str, int]:
        """API calls made so far, per operation, across all adapters."""
        total: Counter[str] = Counter()
        for part in (self.catalog, self.prices, self.network, self.amis, self.templates, self.profiles,
                     self.fleet, self.instances, self.reservations):
            total.update(part.calls)
        return dict(total)

    def instance_types(self) -> Mapping[str, InstanceType]:
        return self.catalog.instance_types()

    def expect_catalogue(self, needs: CatalogueNeeds) -> None:
        self.catalog.expect(needs)

    def offerings(self) -> list[Offering]:
        """Priced offerings. Unchanged inputs give the same Offering objects as the last call (a new list),
        which lets the planner see at once that its NodePool table still holds (scheduling/prepared.py)."""
        types = self.catalog.instance_types()
        on_demand = self.prices.on_demand()
        spot = self.prices.spot()
        blocked = self.unavailable_offerings.snapshot()
        offered = self.catalog.offered()
        inputs = (dict(types), dict(offered), dict(on_demand), dict(spot), blocked)
        if self._offerings is not None and self._offerings[0] == inputs:
            return list(self._offerings[1])
        out = self._build_offerings(types, offered, on_demand, spot, blocked)
        self._offerings = (inputs, out)
        return list(out)

    @staticmethod
    def _build_offerings(types: Mapping[str, InstanceType], offered: Mapping[str, frozenset[str]],
                         on_demand: Mapping[str, float], spot: Mapping[tuple[str, str], float],
                         blocked: Collection[tuple[str, str, str]]) -> list[Offering]:
        out: list[Offering] = []
        for name, zones in sorted(offered.items()):
            it = types[name]
            for zone in sorted(zones):
                candidates: list[tuple[CapacityType, float | None]] = [
                    ("on-demand", on_demand.get(name)), ("spot", spot.get((name, zone)))]
                for ct, price in candidates:
                    if price is None or not supports(it, ct):
                        continue
                    out.append(Offering(instance_type=name, zone=zone, capacity_type=ct, price=price,
                                        available=(name, zone, ct) not in blocked))
        return out

    def subnet_zones(self, node_class: NodeClass) -> frozenset[str]:
        return frozenset(self.network.subnets_by_zone(node_class.subnet_selector_terms, node_class=node_class.name))

    def capacity_reservations(self, node_class: NodeClass) -> list[CapacityReservation]:
        now = self.clock.now()
        return [replace(r, available=self.reservations.remaining(r.reservation_id))
                for r in self.reservations.for_node_class(node_class) if r.usable(now)]

    def describe_capacity_reservations(self, reservation_ids: Iterable[str]) -> list[CapacityReservation]:
        return self.reservations.by_ids(reservation_ids)

    def resolve_node_class(self, node_class: NodeClass) -> ResolvedNodeClass:
        amis = self.amis.resolve(node_class, ("standard", "nvidia", "neuron"))
        subnets = self.network.subnets(node_class.subnet_selector_terms, node_class=node_class.name)
        groups = self.network.security_groups(node_class.security_group_selector_terms, node_class=node_class.name)
        return ResolvedNodeClass(amis=frozenset(a.image_id for a in amis.values()),
                                 subnets=frozenset(s.subnet_id for s in subnets), security_groups=frozenset(groups))

    def unavailable(self) -> frozenset[tuple[str, str, str]]:
        return self.unavailable_offerings.snapshot()

    @property
    def prices_stale(self) -> bool:
        return self.prices.stale

    def prepare(self, request: FleetRequest) -> list[PreparedLaunch]:
        """Resolve and create everything a launch needs without launching (for warm-up and benchmarks)."""
        return [self.fleet.prepare(request, ct) for ct in request.capacity_types if ct != "reserved"]

    def launch(self, request: FleetRequest) -> FleetResult:
        return self.fleet.launch(request)

    def in_flight(self, registered_instance_ids: Collection[str]) -> list[CloudInstance]:
        return self.instances.in_flight(registered_instance_ids)

    def owned_instances(self) -> list[CloudInstance]:
        return self.instances.owned()

    def claimed_instances(self, claim_ids: Collection[str]) -> list[CloudInstance]:
        return self.instances.of_claims(claim_ids) if claim_ids else []

    def karpenter_instances(self) -> list[CloudInstance]:
        return self.instances.karpenter_launched()

    def describe_instances(self, instance_ids: Iterable[str]) -> list[CloudInstance]:
        return self.instances.describe(instance_ids)

    def terminate(self, instance_ids: Iterable[str]) -> list[str]:
        return self.instances.terminate(instance_ids)

    def mark_unavailable(self, instance_type: str, zone: str, capacity_type: str) -> None:
        self.unavailable_offerings.mark(instance_type, zone, capacity_type)

    def launch_templates(self) -> list[LaunchTemplateInfo]:
        return self.templates.owned()

    def launch_template_last_used(self, name: str) -> float | None:
        return self.templates.last_used(name)

    def delete_launch_template(self, template_id: str) -> bool:
        return self.templates.delete(template_id)


if TYPE_CHECKING:
    def _implements_cloud_port(cloud: AwsCloud) -> CloudPort:
        return cloud  # mypy proves AwsCloud satisfies the protocol
