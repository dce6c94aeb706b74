"""A small declarative schema and the walker that checks a raw manifest against it at every depth.

Unlike the parsers (which stop at an object's first bad shape), the walker visits every field and
returns every ``Problem``: unknown fields with a did-you-mean, fields that belong to another API version
(naming the version and where the field went), wrong types, values outside an enum, and whatever a
``Custom`` check adds (label keys, quantities, instance types). Paths are relative to the walked object.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from autoscaler.domain.durations import optional_duration_seconds
from autoscaler.domain.errors import Path, Problem, closest, did_you_mean
from autoscaler.domain.quantity import QuantityError, cpu_millis, to_int

Check = Callable[[Any, Path], list[Problem]]


class Spec:
    """Base of every schema node."""


@dataclass(frozen=True)
class Scalar(Spec):
    kind: str  # "string", "integer", "number", "boolean", "any"
    minimum: int | None = None
    maximum: int | None = None


@dataclass(frozen=True)
class Enum(Spec):
    values: tuple[str, ...]
    # value -> what to write instead (e.g. a value another API version spells differently)
    hints: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Obj(Spec):
    fields: Mapping[str, Spec]
    required: tuple[str, ...] = ()
    # field -> why it is wrong here and what to write instead (another version's field, a moved field)
    foreign: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ListOf(Spec):
    item: Spec


@dataclass(frozen=True)
class MapOf(Spec):
    value: Spec
    key: Check | None = None


@dataclass(frozen=True)
class Custom(Spec):
    """A base shape, then a check of the value (run only when the shape is right)."""

    base: Spec
    check: Check


STRING, INTEGER, BOOLEAN, ANY = Scalar("string"), Scalar("integer"), Scalar("boolean"), Scalar("any")
STRING_MAP = MapOf(STRING)


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return f"the number {value}"
    if isinstance(value, str):
        return f"the string {value!r}"
    return "a list" if isinstance(value, list) else "a mapping" if isinstance(value, Mapping) else type(value).__name__


def _scalar(spec: Scalar, value: Any, path: Path) -> list[Problem]:
    ok = {
        "string": isinstance(value, str),
        "integer": isinstance(value, int) and not isinstance(value, bool),
        "number": isinstance(value, int | float) and not isinstance(value, bool),
        "boolean": isinstance(value, bool),
        "any": True,
    }[spec.kind]
    if not ok:
        hint = " (quote it: YAML reads yes/no/on/off and bare numbers as other types)" if spec.kind == "string" else ""
        article = "an" if spec.kind[0] in "aeiou" else "a"
        return [Problem(f"must be {article} {spec.kind}, not {_type_name(value)}{hint}", path)]
    if spec.minimum is not None and value < spec.minimum:
        return [Problem(f"{value} is below the minimum {spec.minimum}; write a value >= {spec.minimum}", path)]
    if spec.maximum is not None and value > spec.maximum:
        return [Problem(f"{value} is above the maximum {spec.maximum}; write a value <= {spec.maximum}", path)]
    return []


def walk(spec: Spec, value: Any, path: Path = ()) -> list[Problem]:
    """Every problem of ``value`` against ``spec``."""
    if isinstance(spec, Scalar):
        return _scalar(spec, value, path)
    if isinstance(spec, Enum):
        if value in spec.values:
            return []
        if isinstance(value, str) and value in spec.hints:
            return [Problem(f"{value!r} {spec.hints[value]}", path)]
        return [Problem(f"{value!r} is not allowed; {did_you_mean(str(value), spec.values)}", path)]
    if isinstance(spec, Custom):
        problems = walk(spec.base, value, path)
        return problems or spec.check(value, path)
    if isinstance(spec, ListOf):
        if not isinstance(value, list):
            return [Problem(f"must be a list, not {_type_name(value)}", path)]
        return [p for i, item in enumerate(value) for p in walk(spec.item, item, (*path, i))]
    if not isinstance(value, Mapping):
        return [Problem(f"must be a mapping, not {_type_name(value)}", path)]
    if isinstance(spec, MapOf):
        out: list[Problem] = []
        for key, item in value.items():
            if spec.key is not None:
                out += spec.key(key, (*path, key))
            out += walk(spec.value, item, (*path, key))
        return out
    assert isinstance(spec, Obj)
    return _object(spec, value, path)


def _object(spec: Obj, value: Mapping[str, Any], path: Path) -> list[Problem]:
    out: list[Problem] = []
    for key, item in value.items():
        where = (*path, key)
        if key in spec.fields:
            out += walk(spec.fields[key], item, where)
        elif key in spec.foreign:
            out.append(Problem(spec.foreign[key], where))
        else:
            out.append(Problem(f"unknown field {key!r}; {did_you_mean(str(key), spec.fields)}", where))
            # A typo must not hide what is inside it: check the content as the field it was meant to be.
            meant = closest(str(key), spec.fields)
            if meant is not None and meant not in value:
                out += walk(spec.fields[meant], item, where)
    out += [Problem(f"{key!r} is required", path) for key in spec.required if key not in value]
    return out


# --- value checks shared by the schemas ---------------------------------------------------------------

def quantity(value: Any, path: Path, *, resource: str = "") -> list[Problem]:
    """A Kubernetes quantity that is not negative."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return [Problem(f"must be a quantity such as '100' or '64Gi', not {_type_name(value)}", path)]
    try:
        amount = cpu_millis(value) if resource == "cpu" else to_int(value)
    except (QuantityError, ValueError) as exc:
        return [Problem(f"{value!r} is not a quantity ({exc}); write e.g. '1000' or '1000Gi'", path)]
    if amount < 0:
        return [Problem(f"{value!r} is negative; a quantity must be >= 0", path)]
    return []


def duration(value: Any, path: Path) -> list[Problem]:
    """A Go duration (``30s``, ``720h``) or ``Never``."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        return [Problem(f"must be a duration such as '30s' or 'Never', not {_type_name(value)}", path)]
    try:
        optional_duration_seconds(value, field="")
    except (ValueError, TypeError):
        return [Problem(f"{value!r} is not a duration; write e.g. '30s', '15m', '720h' or 'Never'", path)]
    return []


DURATION = Custom(Scalar("any"), duration)
