"""What a pod asks of a node, as kube-scheduler counts it: Kubernetes quantities, the requests the fit reads
(``pod_requests``, component-helpers' ``PodRequests``) and the non-zero requests the score reads
(``score_requests``). Part of the simulation's kube-scheduler oracle (``simulator/sim/scheduler.py``)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

Obj = Mapping[str, Any]

_SUFFIXES = {
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
    "k": Decimal(10**3), "M": Decimal(10**6), "G": Decimal(10**9), "T": Decimal(10**12),
    "P": Decimal(10**15), "E": Decimal(10**18),
    "Ki": Decimal(2**10), "Mi": Decimal(2**20), "Gi": Decimal(2**30), "Ti": Decimal(2**40),
    "Pi": Decimal(2**50), "Ei": Decimal(2**60),
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")
def quantity(value: Any) -> Decimal:
    """A Kubernetes resource quantity (``500m``, ``1.5Gi``, ``2e3``) as a number of base units."""
    if isinstance(value, int | float):
        return Decimal(str(value))
    match = _QUANTITY.match(str(value).strip())
    if not match or match.group(2) not in _SUFFIXES:
        raise ValueError(f"not a Kubernetes quantity: {value!r}")
    return Decimal(match.group(1)) * _SUFFIXES[match.group(2)]


def add_to(into: dict[str, Decimal], requests: Mapping[str, Decimal]) -> None:
    for name, value in requests.items():
        into[name] = into.get(name, Decimal(0)) + value


def _requests_of(resources: Obj | None) -> dict[str, Decimal]:
    """Requests as the API server's defaulting leaves them: a resource with a limit and no request requests
    its limit."""
    resources = resources or {}
    out = {name: quantity(v) for name, v in (resources.get("limits") or {}).items()}
    out.update({name: quantity(v) for name, v in (resources.get("requests") or {}).items()})
    return out


def _pod_level(name: str) -> bool:
    """The resources a pod-level ``spec.resources`` may set (PodLevelResources)."""
    return name in ("cpu", "memory") or name.startswith("hugepages-")


def _aggregate(spec: Obj, defaults: Mapping[str, Decimal]) -> dict[str, Decimal]:
    """component-helpers' ``PodRequests``: the containers' requests summed (sidecar init containers
    included) or the largest ordinary init container if that is more, the pod-level requests in place of
    the containers' for the resources they set, plus the overhead. ``defaults`` stand in for a container's
    missing request (the score's non-zero requests)."""
    total: dict[str, Decimal] = {}
    sidecars: dict[str, Decimal] = {}
    init_peak: dict[str, Decimal] = {}
    for container in spec.get("initContainers") or ():
        req = {**defaults, **_requests_of(container.get("resources"))}
        if container.get("restartPolicy") == "Always":
            add_to(sidecars, req)
            continue
        for name, value in req.items():
            # An ordinary init container runs beside the sidecars started before it.
            need = value + sidecars.get(name, Decimal(0))
            init_peak[name] = max(init_peak.get(name, Decimal(0)), need)
    for container in spec.get("containers") or ():
        add_to(total, {**defaults, **_requests_of(container.get("resources"))})
    add_to(total, sidecars)
    for name, peak in init_peak.items():
        total[name] = max(total.get(name, Decimal(0)), peak)
    total.update({name: value for name, value in _requests_of(spec.get("resources")).items() if _pod_level(name)})
    add_to(total, {name: quantity(v) for name, v in (spec.get("overhead") or {}).items()})
    return total


def pod_requests(pod: Obj) -> dict[str, Decimal]:
    """What the pod asks of a node (NodeResourcesFit's filter): ``_aggregate`` plus one pod slot."""
    total = _aggregate(pod.get("spec") or {}, {})
    total["pods"] = total.get("pods", Decimal(0)) + 1
    return total


# kube-scheduler's DefaultMilliCPURequest and DefaultMemoryRequest (pkg/scheduler/util/pod_resources.go).
NON_ZERO_DEFAULTS = {"cpu": Decimal("0.1"), "memory": Decimal(200 * 2**20)}


def score_requests(pod: Obj) -> dict[str, Decimal]:
    """The cpu and memory the score counts for a pod (the scheduler's non-zero requests): a container with no
    cpu or memory request counts as asking 100m and 200Mi; never in the fit, only in the score. With pod-level
    requests, only a resource neither they nor any container set gets the default."""
    spec = pod.get("spec") or {}
    defaults = NON_ZERO_DEFAULTS
    if any(_pod_level(name) for name in _requests_of(spec.get("resources"))):
        plain = _aggregate(spec, {})
        defaults = {name: value for name, value in NON_ZERO_DEFAULTS.items() if name not in plain}
    total = _aggregate(spec, defaults)
    return {name: total.get(name, Decimal(0)) for name in NON_ZERO_DEFAULTS}



def score_units(name: str, value: Decimal) -> int:
    """kube-scheduler's integer units for the score, rounded up as ``Quantity`` does: millicores of cpu,
    bytes of memory."""
    return math.ceil(value * 1000) if name == "cpu" else math.ceil(value)
