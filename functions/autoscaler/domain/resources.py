"""Resource lists: mappings from a resource name to an integer amount in canonical units.

``cpu`` is in millicores; ``memory`` and ``ephemeral-storage`` in bytes; ``pods`` and extended
resources (``nvidia.com/gpu``, ...) are counts. Missing keys mean zero.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from autoscaler.domain.quantity import cpu_millis, to_int

CPU = "cpu"
MEMORY = "memory"
EPHEMERAL_STORAGE = "ephemeral-storage"
PODS = "pods"
NVIDIA_GPU = "nvidia.com/gpu"

Resources = dict[str, int]


def parse_resource_list(raw: Mapping[str, object] | None) -> Resources:
    """Convert a Kubernetes ResourceList (``{"cpu": "500m", "memory": "1Gi"}``) to canonical ints."""
    out: Resources = {}
    for name, value in (raw or {}).items():
        if not isinstance(value, str | int | float):
            raise ValueError(f"resource {name!r} has a non-quantity value {value!r}")
        amount = cpu_millis(value) if name == CPU else to_int(value)
        if amount < 0:
            raise ValueError(f"resource {name!r}: {value!r} is negative; a quantity must be >= 0")
        out[name] = amount
    return out


def add(a: Mapping[str, int], b: Mapping[str, int]) -> Resources:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + v
    return out


def subtract(a: Mapping[str, int], b: Mapping[str, int]) -> Resources:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) - v
    return out


def maximum(a: Mapping[str, int], b: Mapping[str, int]) -> Resources:
    out = dict(a)
    for k, v in b.items():
        out[k] = max(out.get(k, 0), v)
    return out


def total(items: Iterable[Mapping[str, int]]) -> Resources:
    out: Resources = {}
    for item in items:
        for k, v in item.items():
            out[k] = out.get(k, 0) + v
    return out
