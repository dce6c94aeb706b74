"""``autoscaler validate``: check any configuration file the product reads, telling by content which it
is: a cluster file (``clusterName``), Karpenter manifests (``kind: NodePool`` ..., one or several
``---`` documents, or a ``List``), or a snapshot for ``autoscaler plan`` (``pods``, ``nodes``,
``instanceTypes`` ...). Every problem of every file is reported, each with its line where known.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path as FilePath
from typing import Any

import yaml

from autoscaler.config import check_cluster_data
from autoscaler.domain.errors import ConfigError, Problem, with_lines
from autoscaler.domain.karpenter_schema import NODE_CLASS_SCHEMAS, NODE_POOL_SCHEMAS
from autoscaler.domain.manifest_check import check_manifest
from autoscaler.domain.nodeclass import parse_node_class
from autoscaler.domain.nodepool import parse_node_pool
from autoscaler.domain.snapshot import check_manifests, parse_snapshot
from autoscaler.source_file import (
    MAX_CONFIG_BYTES,
    MAX_SNAPSHOT_BYTES,
    Document,
    DuplicateKeysError,
    load_fast,
    parse_yaml,
    read_text,
)

SNAPSHOT_KEYS = frozenset({"pods", "nodes", "daemonSets", "instanceTypes", "offerings", "prices", "inFlight",
                           "persistentVolumeClaims", "persistentVolumes", "storageClasses"})
_SNAPSHOT_ITEM = re.compile(r"^snapshot(?: (\w+)\[(\d+)\]|: (\w+)): ")
_POOL_KINDS = {kind for _, kind in NODE_POOL_SCHEMAS}
_CLASS_KINDS = {kind for _, kind in NODE_CLASS_SCHEMAS}


@dataclass
class FileReport:
    """What one file is and what is wrong with it."""

    path: str
    kind: str = "unknown"
    problems: list[Problem] = field(default_factory=list)

    @property
    def errors(self) -> int:
        return sum(p.severity == "error" for p in self.problems)

    @property
    def warnings(self) -> int:
        return sum(p.severity == "warning" for p in self.problems)

    def to_json(self) -> dict[str, Any]:
        return {"file": self.path, "kind": self.kind, "valid": self.errors == 0,
                "problems": [{"line": p.line, "object": p.subject, "field": p.field, "message": p.message,
                              "severity": p.severity} for p in self.problems]}


def _kind_of(data: Any) -> str:
    if isinstance(data, Mapping):
        if data.keys() & SNAPSHOT_KEYS:
            return "snapshot"
        if "clusterName" in data:
            return "cluster file"
        if data.get("kind") in _POOL_KINDS | _CLASS_KINDS or data.get("kind") == "List":
            return "manifests"
        if "nodePools" in data or "nodeClasses" in data:
            return "snapshot" if "region" in data and "clusterName" not in data else "cluster file"
    return "unknown"


def _manifests(docs: list[Document]) -> list[Problem]:
    out: list[Problem] = []
    for doc in docs:
        problems = list(doc.problems)
        data = doc.data
        items = data.get("items") if isinstance(data, Mapping) and data.get("kind") == "List" else None
        objects = [(("items", i), o) for i, o in enumerate(items)] if isinstance(items, list) else [((), data)]
        for root, obj in objects:
            if obj is None:
                continue
            kind = obj.get("kind") if isinstance(obj, Mapping) else None
            if kind in _POOL_KINDS:
                subject, found = check_manifest(obj, schemas=NODE_POOL_SCHEMAS, default_kind="NodePool",
                                                default_api="karpenter.sh/v1", parse=parse_node_pool)
            elif kind in _CLASS_KINDS:
                # A role is checked against the cluster file's node role, which a lone manifest lacks.
                subject, found = check_manifest(
                    obj, schemas=NODE_CLASS_SCHEMAS, default_kind="EC2NodeClass", default_api="karpenter.k8s.aws/v1",
                    parse=lambda o: parse_node_class(o, default_role="(set by the cluster file)"))
            else:
                found, subject = [Problem(f"kind {kind!r} is not a NodePool, Provisioner, EC2NodeClass or "
                                          "AWSNodeTemplate")], ""
            problems += [p.under(root, subject) for p in found]
        out += with_lines(problems, doc.lines)
    return out


def _snapshot(data: Any, doc: Document | None) -> list[Problem]:
    problems: list[Problem] = list(doc.problems) if doc else []
    if isinstance(data, Mapping):
        pools, classes = data.get("nodePools"), data.get("nodeClasses")
        manifest = check_manifests(pools if isinstance(pools, list) else [],
                                   classes if isinstance(classes, list) else [])
        problems += manifest
    already = {p.render() for p in problems}
    try:
        parse_snapshot(data if isinstance(data, Mapping) else {})
    except ConfigError as exc:
        for line in str(exc).splitlines():
            if line in already:
                continue
            # "snapshot pods[3]: ..." -> the line of pods[3] in the file
            match = _SNAPSHOT_ITEM.match(line)
            path: tuple[str | int, ...] = ()
            if match:
                path = (match[1], int(match[2])) if match[1] else (match[3],)
            problems.append(Problem(line, path, field_from=len(path)))
    if not isinstance(data, Mapping):
        problems.append(Problem("the snapshot must be a mapping of the keys in docs/snapshot.md"))
    return with_lines(problems, doc.lines) if doc else problems


def validate_file(path: str | FilePath) -> FileReport:
    """Check one file; never raises for bad content."""
    report = FileReport(str(path))
    text, problems = read_text(path, max_bytes=MAX_SNAPSHOT_BYTES)
    if text is None:
        report.problems = problems
        return report
    if len(text) > MAX_CONFIG_BYTES:  # only a snapshot is this big: skip line tracking, load fast
        try:
            data = load_fast(text)
        except DuplicateKeysError as exc:
            report.kind, report.problems = "snapshot", exc.problems
            return report
        except (yaml.YAMLError, ValueError, RecursionError) as exc:
            report.problems = [Problem(f"not valid YAML or JSON: {exc}")]
            return report
        report.kind = _kind_of(data)
        if report.kind != "snapshot":
            report.problems = [Problem(f"the file is {len(text) / 1e6:.1f} MB: too large for a {report.kind}")]
            return report
        report.problems = _snapshot(data, None)
        return report
    docs = parse_yaml(text, multi=True)
    if len(docs) == 1 and docs[0].data is None and docs[0].problems:
        report.problems = docs[0].problems
        return report
    report.kind = _kind_of(docs[0].data if docs else None)
    if report.kind == "cluster file" and len(docs) == 1:
        report.problems = with_lines([*docs[0].problems, *check_cluster_data(docs[0].data)[1]], docs[0].lines)
    elif report.kind == "manifests":
        report.problems = _manifests(docs)
    elif report.kind == "snapshot" and len(docs) == 1:
        report.problems = _snapshot(docs[0].data, docs[0])
    else:
        report.problems = [Problem("cannot tell what this file is: expected a cluster file (clusterName, region, "
                                   "nodePools, nodeClasses), Karpenter manifests (kind: NodePool, EC2NodeClass, "
                                   "...) or a snapshot (pods, nodes, instanceTypes, ...; docs/snapshot.md)")]
    return report
