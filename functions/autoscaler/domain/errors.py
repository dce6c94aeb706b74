"""Errors a user can hit in configuration, each naming the object and the field that is wrong."""

from __future__ import annotations

from pydantic import ValidationError


class ConfigError(ValueError):
    """Invalid NodePool, EC2NodeClass or cluster configuration. The message names object and field."""


def describe_validation_error(subject: str, exc: ValidationError, *, path_prefix: str = "") -> ConfigError:
    """Turn a pydantic error into one readable message: ``EC2NodeClass default: spec.role: ...``."""
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        path = f"{path_prefix}{loc}" if loc else (path_prefix.rstrip(".") or "(root)")
        lines.append(f"{subject}: {path}: {err['msg']}")
    return ConfigError("; ".join(lines))
