"""Errors a user can hit in configuration, each naming the object and the field that is wrong."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError


class ConfigError(ValueError):
    """Invalid NodePool, EC2NodeClass, cluster file or snapshot. The message names the object and field;
    with ``source`` (a file) and ``problems`` (``"field.path: what is wrong"``), every problem is one line
    ``source: problem``."""

    def __init__(self, message: str = "", *, source: str = "", problems: Sequence[str] = ()) -> None:
        self.source = source
        self.problems = list(problems) or [message]
        super().__init__("\n".join(f"{source}: {p}" for p in self.problems) if source else message)


def describe_validation_error(subject: str, exc: ValidationError, *, path_prefix: str = "") -> ConfigError:
    """Turn a pydantic error into one readable message: ``EC2NodeClass default: spec.role: ...``."""
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        path = f"{path_prefix}{loc}" if loc else (path_prefix.rstrip(".") or "(root)")
        lines.append(f"{subject}: {path}: {err['msg']}")
    return ConfigError("; ".join(lines))


def manifest_header(obj: Mapping[str, Any], *, default_kind: str,
                    default_api: str) -> tuple[str, str, str, str, Mapping[str, Any]]:
    """``(kind, apiVersion, name, subject, spec)`` of a Karpenter manifest; ``subject`` ("NodePool
    default") starts every error message. Raises ConfigError without a name or a spec."""
    kind = str(obj.get("kind") or default_kind)
    api = str(obj.get("apiVersion") or default_api)
    name = str((obj.get("metadata") or {}).get("name") or "")
    subject = f"{kind} {name or '<unnamed>'}"
    if not name:
        raise ConfigError(f"{subject}: metadata.name is required")
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        raise ConfigError(f"{subject}: spec is required")
    return kind, api, name, subject, spec
