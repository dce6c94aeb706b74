"""Subnets and security groups from an EC2NodeClass's selector terms. Terms are ORed; within a term
tags (and name) must all match. A tag value of ``*`` matches any value, as in Karpenter."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from autoscaler.adapters.aws._calls import Caller, TtlCache
from autoscaler.app.ports import Clock
from autoscaler.domain.errors import ConfigError
from autoscaler.domain.nodeclass import SelectorTerm


@dataclass(frozen=True, slots=True)
class Subnet:
    subnet_id: str
    zone: str
    available_ips: int
    vpc_id: str = ""


def _filters(term: SelectorTerm, *, id_filter: str, name_filter: str) -> list[dict[str, Any]]:
    if term.id:
        return [{"Name": id_filter, "Values": [term.id]}]
    filters: list[dict[str, Any]] = []
    if term.name:
        filters.append({"Name": name_filter, "Values": [term.name]})
    for key, value in (term.tags or {}).items():
        if value == "*":
            filters.append({"Name": "tag-key", "Values": [key]})
        else:
            filters.append({"Name": f"tag:{key}", "Values": [value]})
    return filters


def _key(terms: tuple[SelectorTerm, ...]) -> str:
    # Selector terms hold dicts, so they are not hashable; their JSON is.
    return "|".join(t.model_dump_json() for t in terms)


class NetworkResolver:
    """Resolves selector terms, caching each distinct term set for ``ttl`` seconds (default 60 s:
    free-IP counts move, but not within one provisioning pass)."""

    def __init__(self, ec2: Any, *, clock: Clock, ttl: float = 60.0) -> None:
        self._ec2 = Caller(ec2)
        self._subnets: TtlCache[list[Subnet]] = TtlCache(clock=clock, ttl=ttl)
        self._groups: TtlCache[list[str]] = TtlCache(clock=clock, ttl=ttl)

    @property
    def calls(self) -> dict[str, int]:
        return dict(self._ec2.calls)

    def subnets(self, terms: Iterable[SelectorTerm], *, node_class: str = "") -> list[Subnet]:
        """Every subnet matching any term, most free addresses first."""
        terms = tuple(terms)
        return self._subnets.get_or_load(_key(terms), lambda: self._load_subnets(terms, node_class))

    def _load_subnets(self, terms: tuple[SelectorTerm, ...], node_class: str) -> list[Subnet]:
        found: dict[str, Subnet] = {}
        for term in terms:
            filters = _filters(term, id_filter="subnet-id", name_filter="tag:Name")
            for page in self._ec2.pages("describe_subnets", Filters=filters):
                for s in page.get("Subnets", ()):
                    found[s["SubnetId"]] = Subnet(
                        subnet_id=s["SubnetId"], zone=s["AvailabilityZone"],
                        available_ips=int(s.get("AvailableIpAddressCount") or 0), vpc_id=s.get("VpcId", ""),
                    )
        if not found:
            raise ConfigError(f"EC2NodeClass {node_class}: spec.subnetSelectorTerms match no subnet")
        return sorted(found.values(), key=lambda s: (-s.available_ips, s.subnet_id))

    def subnets_by_zone(self, terms: Iterable[SelectorTerm], *, node_class: str = "") -> dict[str, Subnet]:
        """One subnet per zone: the one with the most free addresses."""
        best: dict[str, Subnet] = {}
        for s in self.subnets(terms, node_class=node_class):
            best.setdefault(s.zone, s)
        return best

    def security_groups(self, terms: Iterable[SelectorTerm], *, node_class: str = "") -> list[str]:
        terms = tuple(terms)
        return self._groups.get_or_load(_key(terms), lambda: self._load_groups(terms, node_class))

    def _load_groups(self, terms: tuple[SelectorTerm, ...], node_class: str) -> list[str]:
        found: set[str] = set()
        for term in terms:
            filters = _filters(term, id_filter="group-id", name_filter="group-name")
            for page in self._ec2.pages("describe_security_groups", Filters=filters):
                found.update(g["GroupId"] for g in page.get("SecurityGroups", ()))
        if not found:
            raise ConfigError(f"EC2NodeClass {node_class}: spec.securityGroupSelectorTerms match no security group")
        return sorted(found)
