"""Label and field selectors as the Kubernetes API server parses them, for the API emulator.

Label selectors: ``a=b``, ``a==b``, ``a!=b``, ``a in (x,y)``, ``a notin (x)``, ``a`` (exists),
``!a`` (does not exist), comma-separated (AND). Field selectors: ``path=value``, ``path==value``,
``path!=value``, comma-separated, on the fields the real server indexes for the kind.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any


class SelectorError(ValueError):
    """A selector the real API server would reject (HTTP 400)."""


Predicate = Callable[[Mapping[str, Any]], bool]

_SET_RE = re.compile(r"^\s*([^\s!=,()]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


def _split_top(selector: str) -> list[str]:
    """Split on commas that are not inside ``( )``."""
    parts, depth, cur = [], 0, []
    for ch in selector:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def _label_term(term: str) -> Callable[[Mapping[str, str]], bool]:
    m = _SET_RE.match(term)
    if m:
        key, op, raw = m.group(1), m.group(2), m.group(3)
        values = {v.strip() for v in raw.split(",") if v.strip()}
        if op == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    for op in ("!=", "==", "="):
        if op in term:
            key, value = (s.strip() for s in term.split(op, 1))
            if not key:
                raise SelectorError(f"labelSelector term {term!r} has no key")
            if op == "!=":
                return lambda labels: labels.get(key) != value
            return lambda labels: labels.get(key) == value
    if term.startswith("!"):
        key = term[1:].strip()
        return lambda labels: key not in labels
    if not re.fullmatch(r"[A-Za-z0-9._/-]+", term):
        raise SelectorError(f"labelSelector term {term!r} is not valid")
    return lambda labels: term in labels


def label_predicate(selector: str | None) -> Predicate | None:
    if not selector:
        return None
    terms = [_label_term(t) for t in _split_top(selector)]

    def match(obj: Mapping[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(t(labels) for t in terms)

    return match


def _path_value(obj: Mapping[str, Any], path: str) -> str:
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, Mapping):
            return ""
        cur = cur.get(part)
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


# Fields the real API server accepts in fieldSelector, per kind (a subset of its field indexes).
SUPPORTED_FIELDS: dict[str, set[str]] = {
    "Pod": {"metadata.name", "metadata.namespace", "spec.nodeName", "status.phase", "spec.schedulerName",
            "spec.serviceAccountName", "status.podIP", "status.nominatedNodeName", "spec.restartPolicy"},
    "Node": {"metadata.name", "spec.unschedulable"},
    "Event": {"metadata.name", "metadata.namespace", "involvedObject.kind", "involvedObject.name",
              "involvedObject.namespace", "involvedObject.uid", "reason", "type", "source"},
}


def field_predicate(selector: str | None, *, kind: str) -> Predicate | None:
    if not selector:
        return None
    allowed = SUPPORTED_FIELDS.get(kind, {"metadata.name", "metadata.namespace"})
    checks: list[tuple[str, bool, str]] = []
    for term in _split_top(selector):
        for op in ("!=", "==", "="):
            if op in term:
                path, value = (s.strip() for s in term.split(op, 1))
                break
        else:
            raise SelectorError(f"fieldSelector term {term!r} needs =, == or !=")
        if path not in allowed:
            raise SelectorError(f'field label not supported: {path} (kind {kind})')
        checks.append((path, op == "!=", value))

    def match(obj: Mapping[str, Any]) -> bool:
        return all((_path_value(obj, path) == value) != negate for path, negate, value in checks)

    return match
