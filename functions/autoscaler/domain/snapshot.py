"""Parse a cluster snapshot document (DESIGN.md "autoscaler plan") into a ``PlanInput``.

The file holds native shapes — ``kubectl get -o json`` objects (a bare list or a ``List`` with
``items``) and ``aws ec2 describe-*`` output — so real output can be pasted in. Pydantic checks the
top level; each object goes through the shared parsers, and every error names the key and index.
Every problem is collected (not only the first) and NodePools / EC2NodeClasses get the same strict
checks as in a cluster file.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from autoscaler.domain.errors import ConfigError, Problem, closest, describe_validation_error
from autoscaler.domain.fleet import in_flight_node, instance_from_ec2
from autoscaler.domain.instance_types import instance_type_from_ec2
from autoscaler.domain.manifest_check import check_node_classes, check_node_pools, node_class_names
from autoscaler.domain.models import InstanceType, Offering
from autoscaler.domain.nodeclass import parse_node_classes
from autoscaler.domain.nodepool import parse_node_pools
from autoscaler.domain.objects import (
    ObjectError,
    daemonset_from_dict,
    namespace_from_dict,
    node_from_dict,
    parse_timestamp,
    pod_from_dict,
    pv_from_dict,
    pvc_from_dict,
    storage_class_from_dict,
)
from autoscaler.domain.plan import InFlightNode, PlanInput

T = TypeVar("T")
Raw = dict[str, Any]
# A snapshot with thousands of bad pods is one mistake repeated: show enough to act on.
MAX_PROBLEMS = 50


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
    namespaces: Any = Field(default_factory=list)
    instance_types: Any = Field(default_factory=list, alias="instanceTypes")
    offerings: Any = Field(default_factory=list)
    prices: _Prices = Field(default_factory=_Prices)
    in_flight: Any = Field(default_factory=list, alias="inFlight")
    taken_at: Any = Field(default=None, alias="takenAt")


def _items(value: Any, *, key: str, wrapper: str = "items") -> list[Raw]:
    """A list of objects, or a ``List``/describe response wrapping one."""
    if value is None:
        return []
    if isinstance(value, Mapping):
        value = value.get(wrapper, value.get("items"))
    if not isinstance(value, list) or not all(isinstance(v, Mapping) for v in value):
        raise ConfigError(f"snapshot {key}: must be a list of objects (or an object with {wrapper!r})")
    return [dict(v) for v in value]


def _each(raws: list[Raw], parse: Callable[[Raw], T], *, key: str, problems: list[str]) -> list[T]:
    out = []
    for i, raw in enumerate(raws):
        try:
            out.append(parse(raw))
        except (ObjectError, ValueError, KeyError, TypeError, AttributeError) as exc:
            problems.append(f"snapshot {key}[{i}]: {exc}")
    return out


def _listed(value: Any, *, key: str, problems: list[str], wrapper: str = "items") -> list[Raw]:
    try:
        return _items(value, key=key, wrapper=wrapper)
    except ConfigError as exc:
        problems.append(str(exc))
        return []


def check_manifests(snap_pools: list[Raw], snap_classes: list[Raw]) -> list[Problem]:
    """The strict NodePool / EC2NodeClass checks of a snapshot (errors and warnings)."""
    return [*check_node_classes(snap_classes, planning=True),
            *check_node_pools(snap_pools, node_classes=node_class_names(snap_classes))]


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


def _top_level(data: Mapping[str, Any]) -> tuple[_Snapshot, list[str]]:
    """The top-level keys; an unknown or malformed one is a problem, and the other keys are still read."""
    known = {f.alias or name for name, f in _Snapshot.model_fields.items()}
    if "clusterName" in data:
        raise ConfigError("snapshot: this is a cluster file, not a snapshot; write one of a live cluster with "
                          "'autoscaler snapshot --cluster-file FILE --output SNAPSHOT' (docs/snapshot.md)")
    problems = []
    for key in data:
        if key not in known:
            close = closest(str(key), known)
            hint = f"did you mean {close!r}?" if close else "expected one of: " + ", ".join(sorted(known))
            problems.append(f"snapshot: {key}: unknown key; {hint}")
    kept = {k: v for k, v in data.items() if k in known}
    try:
        return _Snapshot.model_validate(kept), problems
    except ValidationError as exc:
        problems += str(describe_validation_error("snapshot", exc)).split("; ")
        bad = {str(err["loc"][0]) for err in exc.errors() if err["loc"]}
        return _Snapshot.model_validate({k: v for k, v in kept.items() if k not in bad}), problems


def parse_snapshot(data: Mapping[str, Any]) -> PlanInput:
    """Validate a parsed snapshot document and build the scheduler's input; ConfigError lists every problem."""
    if not isinstance(data, Mapping):
        raise ConfigError("snapshot: the document must be a mapping of the keys in docs/snapshot.md")
    snap, problems = _top_level(data)
    types = [t for t in _each(_listed(snap.instance_types, key="instanceTypes", wrapper="InstanceTypes",
                                      problems=problems),
                              instance_type_from_ec2, key="instanceTypes", problems=problems) if t is not None]
    locations = _listed(snap.offerings, key="offerings", wrapper="InstanceTypeOfferings", problems=problems)
    instances = _listed(snap.in_flight, key="inFlight", wrapper="Instances", problems=problems)
    if isinstance(snap.in_flight, Mapping) and "Reservations" in snap.in_flight:
        instances = [i for r in snap.in_flight["Reservations"] for i in r.get("Instances") or ()]
    raw_pools = _listed(snap.node_pools, key="nodePools", problems=problems)
    raw_classes = _listed(snap.node_classes, key="nodeClasses", problems=problems)
    manifest_errors = [p.render() for p in check_manifests(raw_pools, raw_classes) if p.severity == "error"]
    problems += manifest_errors

    def each(key: str, value: Any, parse: Callable[[Raw], T]) -> list[T]:
        return _each(_listed(value, key=key, problems=problems), parse, key=key, problems=problems)

    pods = each("pods", snap.pods, pod_from_dict)
    nodes = each("nodes", snap.nodes, node_from_dict)
    daemonsets = each("daemonSets", snap.daemon_sets, daemonset_from_dict)
    pvcs = each("persistentVolumeClaims", snap.persistent_volume_claims, pvc_from_dict)
    pvs = each("persistentVolumes", snap.persistent_volumes, pv_from_dict)
    storage_classes = each("storageClasses", snap.storage_classes, storage_class_from_dict)
    namespaces = dict(each("namespaces", snap.namespaces, namespace_from_dict))
    in_flight = [f for f in _each(instances, _in_flight, key="inFlight", problems=problems) if f is not None]
    try:
        offerings = offerings_from(types, locations, snap.prices)
    except ConfigError as exc:
        problems.append(str(exc))
        offerings = []
    taken_at = 0.0
    if snap.taken_at is not None:
        try:
            taken_at = parse_timestamp(str(snap.taken_at))
        except ValueError:
            problems.append(f"snapshot: takenAt: {snap.taken_at!r} is not an RFC 3339 time "
                            "(e.g. 2026-01-31T12:00:00Z)")
    if problems:
        shown = problems[:MAX_PROBLEMS]
        if len(problems) > MAX_PROBLEMS:
            shown.append(f"... and {len(problems) - MAX_PROBLEMS} more problems")
        raise ConfigError("\n".join(shown), problems=shown)
    return PlanInput(
        region=snap.region,
        node_pools=parse_node_pools(raw_pools),
        node_classes=parse_node_classes(raw_classes, default_role="(not needed for planning)"),
        pods=pods, nodes=nodes, daemonsets=daemonsets, pvcs=pvcs, pvs=pvs, storage_classes=storage_classes,
        instance_types=types, offerings=offerings, in_flight=in_flight, taken_at=taken_at,
        namespaces=namespaces,
    )
