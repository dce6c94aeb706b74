"""Every problem of a list of NodePools or EC2NodeClasses (any supported version), in one pass: the
strict schema walk (``karpenter_schema``), the domain parsers' semantic checks, and the checks across
objects (duplicate names, references to a node class that does not exist, the node role).

Findings are ``Problem``s whose paths start at the list's place in the document (``("nodePools", 0, ...)``)
so a file reader can put line numbers on them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from autoscaler.domain import keys
from autoscaler.domain.errors import ConfigError, Path, Problem, did_you_mean
from autoscaler.domain.instance_catalogue import ARM64_FAMILIES, instance_type_names, known_family, known_instance_type
from autoscaler.domain.karpenter_schema import NODE_CLASS_SCHEMAS, NODE_POOL_SCHEMAS
from autoscaler.domain.manifest_schema import Obj, walk
from autoscaler.domain.models import InstanceType, Requirement
from autoscaler.domain.nodeclass import parse_node_class
from autoscaler.domain.nodepool import NodePool, parse_node_pool, requirement_allows

_PATH_PREFIX = re.compile(r"^((?:spec|metadata)(?:\.[A-Za-z0-9_\-]+|\[\d+\])*): ")


def _subject(obj: Mapping[str, Any], default_kind: str) -> str:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return f"{obj.get('kind') or default_kind} {name or '<unnamed>'}"


def _parse_path(text: str) -> Path:
    out: list[str | int] = []
    for part in re.split(r"\.|(?=\[)", text):
        if part.startswith("["):
            out.append(int(part[1:-1]))
        elif part.isdigit():
            out.append(int(part))
        elif part:
            out.append(part)
    return tuple(out)


def _parser_problems(exc: ConfigError, *, subject: str) -> list[Problem]:
    if exc.fields:
        return [Problem(msg, path) for path, msg in exc.fields]
    out = []
    for message in str(exc).split("; "):
        text = message.removeprefix(f"{subject}: ")
        match = _PATH_PREFIX.match(text)
        path = _parse_path(match[1]) if match else ()
        out.append(Problem(text[match.end():] if match else text, path))
    return out


def _overlaps(a: Path, b: Path) -> bool:
    n = min(len(a), len(b))
    return a[:n] == b[:n]


def check_manifest(obj: Any, *, schemas: Mapping[tuple[str, str], Obj], default_kind: str, default_api: str,
                   parse: Callable[[Mapping[str, Any]], object]) -> tuple[str, list[Problem]]:
    """``(subject, problems)`` of one manifest; problem paths are relative to the object."""
    if not isinstance(obj, Mapping):
        return f"{default_kind} <unnamed>", [Problem("must be a mapping with apiVersion, kind, metadata and spec")]
    subject = _subject(obj, default_kind)
    # Like the parsers (and kubectl's defaulting of a snapshot's objects), a missing apiVersion/kind is the newest.
    kind = str(obj.get("kind") or default_kind)
    if not obj.get("apiVersion") and (default_api, kind) not in schemas:
        default_api = next((v for v, k in schemas if k == kind), default_api)
    key = (str(obj.get("apiVersion") or default_api), kind)
    schema = schemas.get(key)
    if schema is None:
        allowed = [f"{v} {k}" for v, k in sorted(schemas)]
        got = " ".join(key)
        return subject, [Problem(f"apiVersion/kind {got!r} is not supported; {did_you_mean(got, allowed)}")]
    problems = walk(schema, obj)
    try:
        parse(obj)
    except ConfigError as exc:
        # Bad shapes the walker already named would be reported twice, less clearly.
        problems += [p for p in _parser_problems(exc, subject=subject)
                     if not any(_overlaps(p.path, q.path) for q in problems if q.severity == "error")]
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        if not any(q.severity == "error" for q in problems):
            problems.append(Problem(f"cannot be read: {exc}"))
    return subject, problems


def _names(objs: Sequence[Any], *, root: Path) -> tuple[set[str], list[Problem]]:
    seen: set[str] = set()
    out: list[Problem] = []
    for i, obj in enumerate(objs):
        meta = obj.get("metadata") if isinstance(obj, Mapping) else None
        name = meta.get("name") if isinstance(meta, Mapping) else None
        if isinstance(name, str) and name in seen:
            out.append(Problem(f"{name!r} is defined twice; give each object its own name",
                               (*root, i, "metadata", "name")))
        if isinstance(name, str):
            seen.add(name)
    return seen, out


def check_node_classes(objs: Sequence[Any], *, root: Path = ("nodeClasses",),
                       default_role: str | None = None, planning: bool = False) -> list[Problem]:
    """Every problem of a list of EC2NodeClass / AWSNodeTemplate manifests. ``default_role`` is the node
    role the stack lets the autoscaler pass: an EC2NodeClass ``spec.role`` must name it. ``planning``
    (snapshots): no node will be launched, so an AWSNodeTemplate needs no instance profile."""
    _, problems = _names(objs, root=root)
    parse_role = default_role or ("(not needed for planning)" if planning else None)
    for i, obj in enumerate(objs):
        subject, found = check_manifest(obj, schemas=NODE_CLASS_SCHEMAS, default_kind="EC2NodeClass",
                                        default_api="karpenter.k8s.aws/v1",
                                        parse=lambda o: parse_node_class(o, default_role=parse_role))
        problems += [p.under((*root, i), subject) for p in found]
        spec = obj.get("spec") if isinstance(obj, Mapping) else None
        role = spec.get("role") if isinstance(spec, Mapping) else None
        if default_role and isinstance(role, str) and role != default_role:
            problems.append(Problem(f"{role!r} is not the node role this stack lets the autoscaler pass "
                                    f"({default_role!r}); write role: {default_role}, or reuse the existing "
                                    f"role with nodeRole: {{create: false, roleName: {role}}} (and "
                                    "createAccessEntry: false if it has an EKS access entry)",
                                    ("spec", "role")).under((*root, i), subject))
    return problems


def check_node_pools(objs: Sequence[Any], *, root: Path = ("nodePools",),
                     node_classes: set[str] | None = None) -> list[Problem]:
    """Every problem of a list of NodePool / Provisioner manifests; with ``node_classes``, each pool's
    node class reference must name one of them."""
    _, problems = _names(objs, root=root)
    for i, obj in enumerate(objs):
        subject, found = check_manifest(obj, schemas=NODE_POOL_SCHEMAS, default_kind="NodePool",
                                        default_api="karpenter.sh/v1", parse=parse_node_pool)
        problems += [p.under((*root, i), subject) for p in found]
        if isinstance(obj, Mapping) and not any(p.severity == "error" for p in found):
            empty = _unsatisfiable_problem(obj)
            if empty is not None:
                problems.append(empty.under((*root, i), subject))
        if node_classes is None or not isinstance(obj, Mapping):
            continue
        path: Path = (("spec", "providerRef", "name") if obj.get("kind") == "Provisioner"
                      else ("spec", "template", "spec", "nodeClassRef", "name"))
        ref: Any = obj
        for part in path:
            ref = ref.get(part) if isinstance(ref, Mapping) else None
        if isinstance(ref, str) and ref not in node_classes:
            problems.append(Problem(f"{ref!r} names no entry of nodeClasses; "
                                    f"{did_you_mean(ref, node_classes)}", path).under((*root, i), subject))
    return problems


# The labels an instance type's name alone decides; requirements on other keys are not judged here.
_NAME_KEYS = (keys.INSTANCE_TYPE_LABEL, keys.FAMILY_LABEL, keys.SIZE_LABEL, keys.CATEGORY_LABEL,
              keys.GENERATION_LABEL, keys.ARCH_LABEL)


def _name_labels(name: str) -> dict[str, str]:
    family = name.split(".", 1)[0]
    it = InstanceType(name, "arm64" if family in ARM64_FAMILIES else "amd64", vcpus=0, memory_mib=0, max_enis=0,
                      ipv4_per_eni=0)
    return {keys.INSTANCE_TYPE_LABEL: name, keys.FAMILY_LABEL: it.family, keys.SIZE_LABEL: it.size,
            keys.CATEGORY_LABEL: it.category, keys.GENERATION_LABEL: str(it.generation),
            keys.ARCH_LABEL: it.architecture}


def _render(r: Requirement) -> str:
    return f"{r.key} {r.operator} [{', '.join(r.values)}]" if r.values else f"{r.key} {r.operator}"


def unsatisfiable_requirements(pool: NodePool) -> list[Requirement] | None:
    """The requirements (Karpenter's defaults included) that together exclude every instance type of the
    bundled catalogue, or None when some type satisfies them. Not judged when the pool names a type or
    family the catalogue does not know (AWS adds types after a release)."""
    reqs = [r for r in pool.requirements if r.key in _NAME_KEYS]
    for r in reqs:
        if r.operator == "In" and ((r.key == keys.FAMILY_LABEL and not all(known_family(v) for v in r.values)) or
                                   (r.key == keys.INSTANCE_TYPE_LABEL
                                    and not all(known_instance_type(v) for v in r.values))):
            return None
    labels = [_name_labels(n) for n in instance_type_names()]

    def satisfied(chosen: Sequence[Requirement]) -> bool:
        return any(all(requirement_allows(r, lab.get(r.key)) for r in chosen) for lab in labels)

    if satisfied(reqs):
        return None
    # Name only the requirements that take part: drop each one whose removal still leaves nothing.
    needed = list(reqs)
    for r in list(needed):
        rest = [q for q in needed if q is not r]
        if not satisfied(rest):
            needed = rest
    return needed


def _unsatisfiable_problem(obj: Any) -> Problem | None:
    try:
        pool = parse_node_pool(obj)
    except (ConfigError, ValueError, TypeError, KeyError, AttributeError):
        return None  # its own errors are reported already
    if pool.is_static:
        return None
    needed = unsatisfiable_requirements(pool)
    if needed is None:
        return None
    given = {(r.get("key"), r.get("operator")) for r in _raw_requirements(obj) if isinstance(r, Mapping)}
    shown = [_render(r) + ("" if (r.key, r.operator) in given else " (Karpenter's default when the NodePool sets "
                                                                   f"no {r.key})") for r in needed]
    return Problem("no instance type satisfies these requirements together: " + "; ".join(shown) +
                   "; widen or remove one of them", _requirements_path(obj))


def _requirements_path(obj: Mapping[str, Any]) -> Path:
    if obj.get("kind") == "Provisioner":
        return ("spec", "requirements")
    return ("spec", "template", "spec", "requirements")


def _raw_requirements(obj: Mapping[str, Any]) -> list[Any]:
    ref: Any = obj
    for part in _requirements_path(obj):
        ref = ref.get(part) if isinstance(ref, Mapping) else None
    return ref if isinstance(ref, list) else []


def node_class_names(objs: Sequence[Any]) -> set[str]:
    return _names(objs, root=())[0]
