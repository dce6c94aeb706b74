"""Patch semantics of the Kubernetes API server, for the emulator.

- JSON merge patch (RFC 7386): objects merge, ``null`` deletes, lists replace.
- Strategic merge patch: like merge patch, except lists the API declares with a merge key merge by
  that key (containers by ``name``, conditions by ``type``, ...), with the ``$patch: delete`` /
  ``$patch: replace`` directives and ``$deleteFromPrimitiveList`` / ``$setElementOrder`` keys.
  Lists the API marks atomic (``spec.taints``, ``tolerations``) replace, exactly as in a merge patch.
- JSON patch (RFC 6902): add, remove, replace, test, copy, move.
"""

from __future__ import annotations

import copy
from typing import Any

# Merge keys of the list fields the emulator's kinds carry (from the API's patchMergeKey tags).
MERGE_KEYS: dict[str, str] = {
    "containers": "name", "initContainers": "name", "ephemeralContainers": "name",
    "volumes": "name", "env": "name", "volumeMounts": "mountPath", "ports": "containerPort",
    "conditions": "type", "ownerReferences": "uid", "imagePullSecrets": "name",
    "hostAliases": "ip", "addresses": "type",
}
# Lists of primitives the API merges as sets.
SET_LISTS = {"finalizers"}


class PatchError(ValueError):
    """A patch the API server would reject (HTTP 422 / 400)."""


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def strategic_merge_patch(target: Any, patch: Any, *, field: str = "") -> Any:
    if isinstance(patch, list):
        return _merge_list(target if isinstance(target, list) else [], patch, field=field)
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$setElementOrder/") or key in ("$retainKeys", "$patch"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            name = key.split("/", 1)[1]
            drop = set(map(str, value or ()))
            out[name] = [v for v in out.get(name) or () if str(v) not in drop]
            continue
        if value is None:
            out.pop(key, None)
            continue
        merged = strategic_merge_patch(out.get(key), value, field=key)
        if merged is None:
            out.pop(key, None)
        else:
            out[key] = merged
    return out


def _merge_list(target: list[Any], patch: list[Any], *, field: str) -> list[Any]:
    if field in SET_LISTS:
        # The patch's values first, then the stored ones it does not name (kube-apiserver's order).
        out: list[Any] = []
        out.extend(v for v in [*patch, *target] if v not in out)
        return out
    key = MERGE_KEYS.get(field)
    if key is None or not all(isinstance(p, dict) for p in patch):
        return copy.deepcopy(patch)
    if any(p.get("$patch") == "replace" for p in patch):
        return [copy.deepcopy(p) for p in patch if p.get("$patch") != "replace"]
    out = [dict(t) for t in target]
    for item in patch:
        if key not in item:
            raise PatchError(f"strategic merge patch: an element of {field} lacks its merge key {key!r}")
        idx = next((i for i, t in enumerate(out) if t.get(key) == item[key]), None)
        if item.get("$patch") == "delete":
            if idx is not None:
                out.pop(idx)
            continue
        if idx is None:
            out.append({k: v for k, v in item.items() if not k.startswith("$")})
        else:
            out[idx] = strategic_merge_patch(out[idx], item, field="")
    return out


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"json patch path {path!r} must start with '/'")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: Any, parts: list[str]) -> tuple[Any, str]:
    cur = doc
    for p in parts[:-1]:
        cur = cur[int(p)] if isinstance(cur, list) else cur[p]
    return cur, parts[-1]


def json_patch(doc: Any, ops: Any) -> Any:
    if not isinstance(ops, list):
        raise PatchError("json patch body must be a list of operations")
    doc = copy.deepcopy(doc)
    for i, op in enumerate(ops):
        try:
            kind, parts = op["op"], _pointer(op["path"])
            if kind == "test":
                parent, last = _parent(doc, parts)
                got = parent[int(last)] if isinstance(parent, list) else parent.get(last)
                if got != op.get("value"):
                    raise PatchError(f"json patch operation {i} (test {op['path']}) failed")
                continue
            if kind in ("copy", "move"):
                src_parent, src_last = _parent(doc, _pointer(op["from"]))
                value = copy.deepcopy(src_parent[int(src_last)] if isinstance(src_parent, list)
                                      else src_parent[src_last])
                if kind == "move":
                    del src_parent[int(src_last) if isinstance(src_parent, list) else src_last]
                kind, value_op = "add", {**op, "value": value}
            else:
                value_op = op
            parent, last = _parent(doc, parts)
            if kind == "add":
                if isinstance(parent, list):
                    parent.insert(len(parent) if last == "-" else int(last), copy.deepcopy(value_op["value"]))
                else:
                    parent[last] = copy.deepcopy(value_op["value"])
            elif kind == "remove":
                del parent[int(last) if isinstance(parent, list) else last]
            elif kind == "replace":
                if isinstance(parent, list):
                    parent[int(last)] = copy.deepcopy(op["value"])
                else:
                    if last not in parent:
                        raise PatchError(f"json patch operation {i}: replace of missing {op['path']}")
                    parent[last] = copy.deepcopy(op["value"])
            else:
                raise PatchError(f"json patch operation {i}: unknown op {kind!r}")
        except (KeyError, IndexError, ValueError, TypeError) as exc:
            if isinstance(exc, PatchError):
                raise
            raise PatchError(f"json patch operation {i} ({op.get('op')} {op.get('path')}): {exc!r}") from exc
    return doc
