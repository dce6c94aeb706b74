"""Raw Kubernetes objects for tests, in the shapes the API server stores."""

from __future__ import annotations

from typing import Any


def pod(name: str, *, namespace: str = "default", node: str | None = None, labels: dict[str, str] | None = None,
        phase: str | None = None, ready: bool = False, cpu: str = "100m", priority_class: str | None = None,
        owner_kind: str | None = None, annotations: dict[str, str] | None = None,
        grace: int | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels or {},
                            "annotations": annotations or {}}
    if owner_kind:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner_kind, "name": f"{name}-owner",
                                    "uid": f"uid-{name}-owner", "controller": True}]
    spec: dict[str, Any] = {"containers": [{"name": "app", "image": "nginx",
                                            "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}]}
    if node:
        spec["nodeName"] = node
    if priority_class:
        spec["priorityClassName"] = priority_class
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    status: dict[str, Any] = {"phase": phase or ("Running" if node else "Pending")}
    if ready:
        status["conditions"] = [{"type": "Ready", "status": "True"}]
    return {"metadata": meta, "spec": spec, "status": status}


def node(name: str, *, labels: dict[str, str] | None = None, cpu: str = "4", memory: str = "16Gi",
         taints: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {"providerID": f"aws:///us-east-1a/i-{abs(hash(name)) % 10**17:017x}", "taints": taints or []},
        "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": "110"},
                   "capacity": {"cpu": cpu, "memory": memory, "pods": "110"},
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }


def pdb(name: str, *, namespace: str = "default", match: dict[str, str], min_available: Any = None,
        max_unavailable: Any = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"selector": {"matchLabels": match}}
    if min_available is not None:
        spec["minAvailable"] = min_available
    if max_unavailable is not None:
        spec["maxUnavailable"] = max_unavailable
    return {"metadata": {"name": name, "namespace": namespace}, "spec": spec}
