"""Lean decoding of the Kubernetes API's pod and node JSON: only the fields the product reads.

A pod as kube-apiserver returns it is 2-6 KB (``managedFields``, env vars, probes, the projected
service-account volume, ...); the autoscaler reads a tenth of it. Decoding whole pages with ``json.loads``
builds every one of those objects and then frees them: at 50,000 pods that is most of a pass's gather CPU
and hundreds of MiB at peak. ``msgspec`` decodes a page straight into plain dicts shaped by the
``TypedDict`` schemas below, skipping every other field in C without building it (``managedFields`` is
never kept). The results are ordinary ``dict``/``list`` JSON values, so the domain's one parser per kind
(``domain/objects.py``) reads them unchanged; a field missing from a schema here would be silently absent,
which ``tests/adapters/test_kube_lean.py`` guards by parsing every test pod and node both ways.

Why msgspec: measured on 2,000 realistic pods (``benchmarks/kube_list.py``), the lean decode plus the
domain parse costs a fraction of ``json.loads`` plus the same parse, and it is one small wheel with no
dependencies (orjson is as fast to decode but builds every field; ``json.loads`` with an ``object_hook``
still builds them and adds a Python call per object).

Schemas are total=False: every field may be absent, as in the API. Whole subtrees the parser walks
(resources, affinity, tolerations, spread constraints, selectors, labels, annotations) are ``Any``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypedDict

import msgspec


class _Owner(TypedDict, total=False):
    apiVersion: str
    kind: str
    name: str
    uid: str
    controller: bool


class _Meta(TypedDict, total=False):
    name: str
    namespace: str
    uid: str
    resourceVersion: str
    labels: Any
    annotations: Any
    ownerReferences: list[_Owner]
    creationTimestamp: Any
    deletionTimestamp: Any


class _Port(TypedDict, total=False):
    hostPort: int
    protocol: str
    hostIP: str


class _Container(TypedDict, total=False):
    name: str
    resources: Any
    ports: list[_Port]
    restartPolicy: str


class _Volume(TypedDict, total=False):
    name: str
    persistentVolumeClaim: Any
    ephemeral: Any
    emptyDir: Any


class _PodSpec(TypedDict, total=False):
    nodeName: str
    nodeSelector: Any
    affinity: Any
    tolerations: Any
    topologySpreadConstraints: Any
    containers: list[_Container]
    initContainers: list[_Container]
    overhead: Any
    volumes: list[_Volume]
    priority: int
    priorityClassName: str
    terminationGracePeriodSeconds: int
    schedulingGates: Any


class _Condition(TypedDict, total=False):
    type: str
    status: str
    reason: str
    lastTransitionTime: Any


class _PodStatus(TypedDict, total=False):
    phase: str
    conditions: list[_Condition]
    nominatedNodeName: str


class LeanPod(TypedDict, total=False):
    metadata: _Meta
    spec: _PodSpec
    status: _PodStatus


class _NodeSpec(TypedDict, total=False):
    taints: Any
    unschedulable: bool
    providerID: str


class _NodeStatus(TypedDict, total=False):
    allocatable: Any
    capacity: Any
    conditions: list[_Condition]


class LeanNode(TypedDict, total=False):
    metadata: _Meta
    spec: _NodeSpec
    status: _NodeStatus


# ``continue`` is a Python keyword: the functional form declares it (sent only while more pages follow).
_ListMeta = TypedDict("_ListMeta", {"resourceVersion": str, "continue": str}, total=False)


class _PodPage(TypedDict, total=False):
    metadata: _ListMeta
    items: list[LeanPod]


class _NodePage(TypedDict, total=False):
    metadata: _ListMeta
    items: list[LeanNode]


# The watcher's pods (``domain/provisionable.py`` reads these only): at 50,000 pending pods in a 128 MB
# function every kept field counts, so annotations keep only the mirror-pod key and owners their kind.
_WatchAnnotations = TypedDict("_WatchAnnotations", {"kubernetes.io/config.mirror": str}, total=False)


class _WatchOwner(TypedDict, total=False):
    kind: str
    controller: bool


class _WatchMeta(TypedDict, total=False):
    name: str
    namespace: str
    resourceVersion: str
    annotations: _WatchAnnotations
    ownerReferences: list[_WatchOwner]
    deletionTimestamp: Any


class _WatchSpec(TypedDict, total=False):
    nodeName: str


class _WatchCondition(TypedDict, total=False):
    type: str
    reason: str
    lastTransitionTime: Any


class _WatchStatus(TypedDict, total=False):
    phase: str
    nominatedNodeName: str
    conditions: list[_WatchCondition]


class WatchedPod(TypedDict, total=False):
    metadata: _WatchMeta
    spec: _WatchSpec
    status: _WatchStatus


class _WatchPage(TypedDict, total=False):
    metadata: _ListMeta
    items: list[WatchedPod]


class _PodEvent(TypedDict, total=False):
    type: str
    object: LeanPod


_POD_PAGE = msgspec.json.Decoder(_PodPage)
_NODE_PAGE = msgspec.json.Decoder(_NodePage)
_POD = msgspec.json.Decoder(LeanPod)
_POD_EVENT = msgspec.json.Decoder(_PodEvent)
_WATCH_PAGE = msgspec.json.Decoder(_WatchPage)


def _decode(decoder: msgspec.json.Decoder[Any], data: bytes) -> dict[str, Any]:
    try:
        out: dict[str, Any] = decoder.decode(data)
    except msgspec.ValidationError as exc:
        # A field of the wrong JSON type (a quantity as a number, a string where a list belongs): say
        # which, as the domain's parser would for the whole object.
        raise ValueError(f"unexpected JSON shape: {exc}") from exc
    return out


def pod_page(data: bytes) -> dict[str, Any]:
    """A pod list page (``/api/v1/pods``): ``{"metadata": {...}, "items": [lean pods]}``."""
    return _decode(_POD_PAGE, data)


def watched_pod_page(data: bytes) -> dict[str, Any]:
    """A page of the watcher's unbound-pod list: only what the provisionable test reads of each pod."""
    return _decode(_WATCH_PAGE, data)


def node_page(data: bytes) -> dict[str, Any]:
    """A node list page (``/api/v1/nodes``)."""
    return _decode(_NODE_PAGE, data)


def pod(data: bytes) -> dict[str, Any]:
    """One pod (a GET of a pod)."""
    return _decode(_POD, data)


def pod_event(data: bytes) -> dict[str, Any]:
    """One watch event of a pod collection (ERROR events carry a Status: read them with ``json.loads``)."""
    return _decode(_POD_EVENT, data)


def decoder_for(path: str) -> Callable[[bytes], dict[str, Any]] | None:
    """The lean page decoder for a pod or node collection path (``/api/v1/pods``,
    ``/api/v1/namespaces/<ns>/pods``, ``/api/v1/nodes``); None (all of the JSON) for any other."""
    if path.startswith("/api/v1/") and path.endswith("/pods"):
        return pod_page
    if path == "/api/v1/nodes":
        return node_page
    return None
