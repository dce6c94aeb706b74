"""Instance catalog (cached, counted) and subnets / security groups from selector terms, on moto."""

from __future__ import annotations

from typing import Any

import pytest

from autoscaler.adapters.aws.catalog import CATALOG_TTL_SECONDS, InstanceCatalog
from autoscaler.adapters.aws.network import NetworkResolver
from autoscaler.adapters.clock import ManualClock
from autoscaler.domain.errors import ConfigError
from autoscaler.domain.nodeclass import SelectorTerm
from tests.adapters.aws.helpers import Network


def test_catalog_converts_types_and_zones_and_a_warm_call_makes_no_requests(ec2: Any, moto_catalog: Any) -> None:
    clock = ManualClock()
    catalog = InstanceCatalog(ec2, clock=clock)
    types = catalog.instance_types()
    assert len(types) > 500  # moto ships the real EC2 catalog
    # What the other tests prime the catalog with (moto's package data) is what it reads from moto
    primed = InstanceCatalog(ec2, clock=clock)
    primed.load(*moto_catalog)
    assert dict(primed.instance_types()) == dict(types) and dict(primed.offered()) == dict(catalog.offered())
    m5 = types["m5.large"]
    assert (m5.architecture, m5.vcpus, m5.memory_mib) == ("amd64", 2, 8192)
    assert types["m6g.large"].architecture == "arm64"
    assert {"us-east-1a", "us-east-1b"} <= catalog.zones_of("m5.large")
    cold = catalog.calls
    assert cold["describe_instance_types"] >= 1 and cold["describe_instance_type_offerings"] >= 1

    clock.advance(CATALOG_TTL_SECONDS - 1)
    catalog.instance_types()
    catalog.offered()
    catalog.zones_of("c5.large")
    assert catalog.calls == cold  # warm: zero calls

    clock.advance(2)  # past the catalogue's TTL
    catalog.instance_types()
    assert sum(catalog.calls.values()) > sum(cold.values())


@pytest.mark.parametrize(
    ("terms", "want_zones", "small"),
    [
        ([SelectorTerm(tags={"karpenter.sh/discovery": "prod"})], {"us-east-1a", "us-east-1b", "us-east-1c"}, False),
        ([SelectorTerm(tags={"karpenter.sh/discovery": "*"})], {"us-east-1a", "us-east-1b", "us-east-1c"}, False),
        ([SelectorTerm(tags={"karpenter.sh/discovery": "staging"})], set(), False),
    ],
)
def test_subnets_by_tags_one_per_zone_with_most_free_ips(
    ec2: Any, network: Network, terms: list[SelectorTerm], want_zones: set[str], small: bool,
) -> None:
    resolver = NetworkResolver(ec2, clock=ManualClock())
    if not want_zones:
        with pytest.raises(ConfigError, match="subnetSelectorTerms match no subnet"):
            resolver.subnets_by_zone(terms, node_class="default")
        return
    by_zone = resolver.subnets_by_zone(terms)
    assert set(by_zone) == want_zones
    # Both a /20 and a /26 are tagged in each zone: the /20 (more free addresses) wins.
    assert {z: s.subnet_id for z, s in by_zone.items()} == network.subnets


def test_subnets_by_id_and_terms_are_ored(ec2: Any, network: Network) -> None:
    resolver = NetworkResolver(ec2, clock=ManualClock())
    terms = [SelectorTerm(id=network.small_subnets["us-east-1a"]), SelectorTerm(id=network.subnets["us-east-1b"])]
    assert {s.subnet_id for s in resolver.subnets(terms)} == {
        network.small_subnets["us-east-1a"], network.subnets["us-east-1b"]}


def test_security_groups_by_tags_id_and_name_and_cached(ec2: Any, network: Network) -> None:
    clock = ManualClock()
    resolver = NetworkResolver(ec2, clock=clock)
    assert resolver.security_groups([SelectorTerm(tags={"karpenter.sh/discovery": "prod"})]) == [
        network.security_group]
    assert resolver.security_groups([SelectorTerm(id=network.other_group)]) == [network.other_group]
    assert resolver.security_groups([SelectorTerm(name="other")]) == [network.other_group]
    calls = resolver.calls
    resolver.security_groups([SelectorTerm(id=network.other_group)])
    assert resolver.calls == calls
    with pytest.raises(ConfigError, match="securityGroupSelectorTerms"):
        resolver.security_groups([SelectorTerm(tags={"team": "nobody"})])
