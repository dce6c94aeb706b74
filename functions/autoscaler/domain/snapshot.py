"""Parse a cluster snapshot document (DESIGN.md "autoscaler plan") into a ``PlanInput``.

The file holds native shapes — ``kubectl get -o json`` objects (a bare list or a ``List`` with
``items``) and ``aws ec2 describe-*`` output — so real output can be pasted in. Pydantic checks the
top level; each object goes through the shared parsers, and every error names the key and index.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from autoscaler.domain.errors import ConfigError, describe_validation_error
from autoscaler.domain.fleet import in_flight_node, instance_from_ec2
from autoscaler.domain.models import InstanceType, Offering
from autoscaler.domain.nodeclass import parse_node_classes
from autoscaler.domain.nodepool import parse_node_pools
from autoscaler.domain.objects import (
    ObjectError,
    daemonset_from_dict,
    instance_type_from_ec2,
    node_from_dict,
    pod_from_dict,
    pv_from_dict,
    pvc_from_dict,
    storage_class_from_dict,
)
from autoscaler.domain.plan import InFlightNode, PlanInput

T = TypeVar("T")
Raw = dict[str, Any]


class _Prices(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    on_demand: dict[str, float] = Field(default_factory=dict, alias="onDemand")
    spot: dict[str, dict[str, float]] = Field(default_factory=dict)


class _Snapshot(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    region: str = ""
    node_pools: Any = Field(default_factory=list, alias="nodePools")
    node_classes: Any = Field(default_factory=list, alias="nodeClasses")
    pods: Any = Field(default_factory=list)
    nodes: Any = Field(default_factory=list)
    daemon_sets: Any = Field(default_factory=list, alias="daemonSets")
    persistent_volume_claims: Any = Field(default_factory=list, alias="persistentVolumeClaims")
    persistent_volumes: Any = Field(default_factory=list, alias="persistentVolumes")
    storage_classes: Any = Field(default_factory=list, alias="storageClasses")
    instance_types: Any = Field(default_factory=list, alias="instanceTypes")
    offerings: Any = Field(default_factory=list)
    prices: _Prices = Field(default_factory=_Prices)
    in_flight: Any = Field(default_factory=list, alias="inFlight")


def _items(value: Any, *, key: str, wrapper: str = "items") -> list[Raw]:
    """A list of objects, or a ``List``/describe response wrapping one."""
    if value is None:
        return []
    if isinstance(value, Mapping):
        value = value.get(wrapper, value.get("items"))
    if not isinstance(value, list) or not all(isinstance(v, Mapping) for v in value):
        raise ConfigError(f"snapshot {key}: must be a list of objects (or an object with {wrapper!r})")
    return [dict(v) for v in value]


def _each(raws: list[Raw], parse: Callable[[Raw], T], *, key: str) -> list[T]:
    out = []
    for i, raw in enumerate(raws):
        try:
            out.append(parse(raw))
        except (ObjectError, ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"snapshot {key}[{i}]: {exc}") from exc
    return out


def _in_flight(raw: Raw) -> InFlightNode | None:
    return in_flight_node(instance_from_ec2(raw))


def offerings_from(types: list[InstanceType], locations: list[Raw], prices: _Prices) -> list[Offering]:
    """On-demand offerings where a price is known; spot ones only where a spot price exists for the zone."""
    by_name = {t.name: t for t in types}
    out = []
    for i, loc in enumerate(locations):
        name, zone = loc.get("InstanceType"), loc.get("Location")
        if not name or not zone:
            raise ConfigError(f"snapshot offerings[{i}]: InstanceType and Location are required")
        it = by_name.get(str(name))
        if it is None:
            continue
        od = prices.on_demand.get(it.name)
        if it.supports_on_demand and od is not None:
            out.append(Offering(it.name, str(zone), "on-demand", od))
        spot = prices.spot.get(str(zone), {}).get(it.name)
        if it.supports_spot and spot is not None:
            out.append(Offering(it.name, str(zone), "spot", spot))
    return out


def parse_snapshot(data: Mapping[str, Any]) -> PlanInput:
    """Validate a parsed snapshot document and build the scheduler's input."""
    if not isinstance(data, Mapping):
        raise ConfigError("snapshot: the document must be a mapping of the keys in DESIGN.md")
    try:
        snap = _Snapshot.model_validate(data)
    except ValidationError as exc:
        raise describe_validation_error("snapshot", exc) from exc
    types = [t for t in _each(_items(snap.instance_types, key="instanceTypes", wrapper="InstanceTypes"),
                              instance_type_from_ec2, key="instanceTypes") if t is not None]
    locations = _items(snap.offerings, key="offerings", wrapper="InstanceTypeOfferings")
    instances = _items(snap.in_flight, key="inFlight", wrapper="Instances")
    if isinstance(snap.in_flight, Mapping) and "Reservations" in snap.in_flight:
        instances = [i for r in snap.in_flight["Reservations"] for i in r.get("Instances") or ()]
    return PlanInput(
        region=snap.region,
        node_pools=parse_node_pools(_items(snap.node_pools, key="nodePools")),
        node_classes=parse_node_classes(_items(snap.node_classes, key="nodeClasses"), planning=True),
        pods=_each(_items(snap.pods, key="pods"), pod_from_dict, key="pods"),
        nodes=_each(_items(snap.nodes, key="nodes"), node_from_dict, key="nodes"),
        daemonsets=_each(_items(snap.daemon_sets, key="daemonSets"), daemonset_from_dict, key="daemonSets"),
        pvcs=_each(_items(snap.persistent_volume_claims, key="persistentVolumeClaims"), pvc_from_dict,
                   key="persistentVolumeClaims"),
        pvs=_each(_items(snap.persistent_volumes, key="persistentVolumes"), pv_from_dict, key="persistentVolumes"),
        storage_classes=_each(_items(snap.storage_classes, key="storageClasses"), storage_class_from_dict,
                              key="storageClasses"),
        instance_types=types,
        offerings=offerings_from(types, locations, snap.prices),
        in_flight=[f for f in _each(instances, _in_flight, key="inFlight") if f is not None],
    )
