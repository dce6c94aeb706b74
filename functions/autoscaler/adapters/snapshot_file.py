"""Snapshot files (docs/snapshot.md): read one (YAML or JSON) for ``autoscaler plan``, and collect and
write one from a live cluster for ``autoscaler snapshot``.

The document itself is parsed by the pure ``domain.snapshot``; every error names the file. YAML is read
by ``source_file.load_fast`` (libyaml's event stream; JSON, which ``autoscaler snapshot`` writes, loads
faster: docs/snapshot.md); a key given twice is an error naming file:line. Collection goes through
the adapters the Lambdas use: the Kubernetes API as raw JSON and ``AwsCloud`` (instance types,
offerings, prices, in-flight instances).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import yaml

from autoscaler.adapters.aws.cloud import AwsCloud
from autoscaler.domain.errors import ConfigError
from autoscaler.domain.objects import node_from_dict
from autoscaler.domain.plan import PlanInput
from autoscaler.domain.snapshot import parse_snapshot
from autoscaler.source_file import MAX_SNAPSHOT_BYTES, DuplicateKeysError, load_fast, paused_gc, read_text


def read_snapshot_data(path: str | Path) -> Any:
    """The parsed document of a snapshot file; ConfigError names the file when it cannot be read."""
    text, problems = read_text(path, max_bytes=MAX_SNAPSHOT_BYTES)
    if text is None:
        raise ConfigError.from_problems(problems, source=str(path))
    try:
        return load_fast(text)
    except DuplicateKeysError as exc:
        raise ConfigError.from_problems(exc.problems, source=str(path)) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise ConfigError(f"{where}: not valid YAML or JSON: {getattr(exc, 'problem', None) or exc}") from exc


def load_snapshot(path: str | Path) -> PlanInput:
    """Read a YAML or JSON snapshot file; ConfigError names the file and every problem in it."""
    with paused_gc():
        data = read_snapshot_data(path)
        try:
            return parse_snapshot(data)
        except ConfigError as exc:
            lines = [f"{path}: {line}" for line in str(exc).splitlines()]
            raise ConfigError("\n".join(lines), source=str(path), problems=exc.problems) from exc


Raw = dict[str, Any]
# Kubernetes collections a snapshot holds: snapshot key -> API path.
KUBE_COLLECTIONS = {
    "pods": "/api/v1/pods",
    "nodes": "/api/v1/nodes",
    "daemonSets": "/apis/apps/v1/daemonsets",
    "persistentVolumeClaims": "/api/v1/persistentvolumeclaims",
    "persistentVolumes": "/api/v1/persistentvolumes",
    "storageClasses": "/apis/storage.k8s.io/v1/storageclasses",
    "namespaces": "/api/v1/namespaces",
}


def _slim(obj: Raw) -> Raw:
    """Drop what planning never reads and makes snapshots large (managedFields, last-applied)."""
    meta = dict(obj.get("metadata") or {})
    meta.pop("managedFields", None)
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items()
                   if k != "kubectl.kubernetes.io/last-applied-configuration"}
    if annotations or "annotations" in meta:
        meta["annotations"] = annotations
    return {**obj, "metadata": meta}


def collect_snapshot(*, list_raw: Callable[[str], list[Raw]], cloud: AwsCloud, region: str,
                     node_pools: Sequence[Mapping[str, Any]],
                     node_classes: Sequence[Mapping[str, Any]], taken_at: float | None = None) -> dict[str, Any]:
    """A snapshot document of a live cluster: its objects (``list_raw(path)`` lists an API collection as
    raw JSON), the region's catalogue and prices, our in-flight instances, and the given NodePools and
    EC2NodeClasses (the cluster file's: the autoscaler keeps them there, not in the cluster). ``taken_at``
    (epoch seconds, default now): when it was read, which ``autoscaler plan`` judges registration
    time-outs at, as the provisioner would have then."""
    when = datetime.fromtimestamp(time.time() if taken_at is None else taken_at, tz=UTC)
    doc: dict[str, Any] = {"region": region, "takenAt": when.isoformat().replace("+00:00", "Z"),
                           "nodePools": list(node_pools), "nodeClasses": list(node_classes)}
    for key, path in KUBE_COLLECTIONS.items():
        items = [_slim(o) for o in list_raw(path)]
        if key == "pods":  # finished pods hold no resources
            items = [o for o in items if (o.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
        doc[key] = items
    registered = {n.instance_id for n in (node_from_dict(o) for o in doc["nodes"]) if n.instance_id}
    offered = cloud.catalog.offered()
    doc["instanceTypes"] = [info for name, info in sorted(cloud.catalog.raw_instance_types().items())
                            if name in offered]
    doc["offerings"] = [{"InstanceType": name, "Location": zone}
                        for name, zones in sorted(offered.items()) for zone in sorted(zones)]
    spot: dict[str, dict[str, float]] = {}
    for (name, zone), price in sorted(cloud.prices.spot().items()):
        spot.setdefault(zone, {})[name] = price
    doc["prices"] = {"onDemand": dict(sorted(cloud.prices.on_demand().items())), "spot": spot}
    doc["inFlight"] = [i.raw for i in cloud.in_flight(registered)]
    return doc


def _plain(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    raise TypeError(f"cannot write {type(value).__name__} to a snapshot")


def write_snapshot(doc: Mapping[str, Any], path: str | Path) -> None:
    """Write a snapshot: JSON for ``.json``, YAML otherwise (both load with ``autoscaler plan``)."""
    plain = json.loads(json.dumps(doc, default=_plain))  # datetimes (EC2 LaunchTime) as RFC 3339 text
    p = Path(path)
    if p.suffix == ".json":
        p.write_text(json.dumps(plain, indent=1) + "\n")
    else:
        dumper: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
        p.write_text(yaml.dump(plain, Dumper=dumper, default_flow_style=False, sort_keys=False))
