"""The body of a Kubernetes ``v1`` Event as the product records it (the fields ``kubectl describe`` shows),
for a pod, a node or any other object reference."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any, Literal

from autoscaler.domain.models import Node, ObjectRef, Pod

Raw = dict[str, Any]


def event_body(target: Pod | Node | ObjectRef, *, reason: str, message: str,
               event_type: Literal["Normal", "Warning"], component: str, now: float) -> tuple[str, Raw]:
    """The namespace the Event goes to and its body (message cut at 1,024 characters, a unique name)."""
    api_version = "v1"
    if isinstance(target, Pod):
        kind, namespace, name, uid = "Pod", target.namespace, target.name, target.uid
    elif isinstance(target, ObjectRef):
        api_version, kind, namespace, name, uid = (target.api_version or "v1", target.kind, target.namespace,
                                                   target.name, target.uid)
    else:
        # Events about cluster-scoped objects live in "default", as kubectl describe expects.
        kind, namespace, name, uid = "Node", "default", target.name, target.name
    stamp = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    involved: Raw = {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid}
    if kind != "Node":
        involved["namespace"] = namespace
    event = {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": f"{name}.{uuid.uuid4().hex[:16]}", "namespace": namespace},
        "involvedObject": involved, "reason": reason, "message": message[:1024], "type": event_type,
        "source": {"component": component}, "reportingComponent": component,
        "reportingInstance": component, "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
    }
    return namespace, event
