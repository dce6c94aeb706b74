"""A node agent for the real control plane: it turns each EC2 instance the autoscaler launched (in moto) into
a Node the way an EKS node does, and runs the pods the real kube-scheduler binds to it.

- Registration (the kubelet started by the AMI's bootstrap from the instance's user data): the Node is
  named by the instance's private DNS name and carries ``providerID``, the labels and taints of its user
  data and the well-known labels, capacity and allocatable of ``simulator.eks_node`` (the EKS AMI's and the
  kubelet's published definitions over EC2's own instance-type data, never ``autoscaler``); it registers
  NotReady and turns Ready ``ready_after`` seconds later.
- Heartbeats: a Lease in ``kube-node-lease`` renewed while the instance runs (the node lifecycle controller
  marks a node whose Lease stops as unreachable); none once the instance is terminated.
- Pods: a pod the scheduler bound here is reported Running and Ready; a pod being deleted is confirmed gone
  (what the kubelet does once its containers stopped; the pause containers stop at once).

Nothing here imports ``autoscaler``: it is a judge of the product.
"""

from __future__ import annotations

import base64
import logging
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from simulator.eks_node import InstanceInfo, capacity_type_of, node_from_user_data
from tests.real_kube import ControlPlane

log = logging.getLogger(__name__)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# ----- the agent ---------------------------------------------------------------------------------------

@dataclass
class _Node:
    name: str
    instance_id: str
    registered_at: float
    ready: bool = False
    gone: bool = False
    lease_renewed: float = 0.0


@dataclass
class NodeAgent:
    """Every ``period`` seconds (a background thread, ``start()`` / ``stop()``), or once per ``step()``."""

    plane: ControlPlane
    ec2: Any
    region: str
    ready_after: float = 1.0
    period: float = 0.25
    nodes: dict[str, _Node] = field(default_factory=dict)  # instance id -> node
    pods_started: set[str] = field(default_factory=set)  # ns/name of pods reported Running
    errors: list[str] = field(default_factory=list)
    _types: dict[str, dict[str, Any]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> NodeAgent:
        self._thread = threading.Thread(target=self._run, name="node-agent", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.step()
            except Exception as exc:
                self.errors.append(repr(exc))
                log.exception("node agent step failed")
            self._stop.wait(self.period)

    def step(self) -> None:
        with self._lock:
            self._instances()
            self._heartbeats()
            self._pods()

    # ----- instances -> nodes -------------------------------------------------------------------
    def _instances(self) -> None:
        # The test's account holds this cluster's instances only.
        pages = self.ec2.get_paginator("describe_instances").paginate()
        for page in pages:
            for reservation in page["Reservations"]:
                for inst in reservation["Instances"]:
                    state = inst["State"]["Name"]
                    known = self.nodes.get(inst["InstanceId"])
                    if state in ("shutting-down", "terminated", "stopping", "stopped"):
                        if known is not None:
                            known.gone = True  # the kubelet died with its machine
                        continue
                    if known is None:
                        self._register(inst)

    def _instance_type(self, name: str) -> dict[str, Any]:
        if name not in self._types:
            self._types[name] = self.ec2.describe_instance_types(InstanceTypes=[name])["InstanceTypes"][0]
        return self._types[name]

    def _register(self, inst: dict[str, Any]) -> None:
        raw = self.ec2.describe_instance_attribute(InstanceId=inst["InstanceId"], Attribute="userData")
        user_data = base64.b64decode((raw.get("UserData") or {}).get("Value") or "")
        info = InstanceInfo.from_ec2(self._instance_type(inst["InstanceType"]))
        zone = inst["Placement"]["AvailabilityZone"]
        name = inst["PrivateDnsName"]
        node = node_from_user_data(user_data, info, name=name, zone=zone, region=self.region,
                                   capacity_type=capacity_type_of(inst))
        body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": dict(node.labels)},
                "spec": {"providerID": f"aws:///{zone}/{inst['InstanceId']}",
                         "taints": [dict(t) for t in node.taints]},
                "status": {**node.status(), "conditions": [self._ready_condition(False)],
                           "nodeInfo": {"architecture": info.architecture, "operatingSystem": "linux",
                                        "kubeletVersion": "v1.37.2", "containerRuntimeVersion": "containerd://2.1",
                                        "kernelVersion": "6.1", "osImage": node.family,
                                        "kubeProxyVersion": "", "machineID": "", "systemUUID": "", "bootID": ""}}}
        status, out = self.plane.request("POST", "/api/v1/nodes", body)
        if status == 409:
            return
        if status != 201:
            raise RuntimeError(f"registering {name}: HTTP {status}: {out}")
        self.nodes[inst["InstanceId"]] = _Node(name, inst["InstanceId"], time.monotonic())

    @staticmethod
    def _ready_condition(ready: bool) -> dict[str, str]:
        return {"type": "Ready", "status": "True" if ready else "False",
                "reason": "KubeletReady" if ready else "KubeletNotReady",
                "message": "kubelet is posting ready status" if ready else "container runtime network not ready",
                "lastHeartbeatTime": _now(), "lastTransitionTime": _now()}

    def _heartbeats(self) -> None:
        now = time.monotonic()
        for node in self.nodes.values():
            if node.gone:
                continue
            if not node.ready and now - node.registered_at >= self.ready_after:
                status, out = self.plane.request(
                    "PATCH", f"/api/v1/nodes/{node.name}/status",
                    {"status": {"conditions": [self._ready_condition(True)]}},
                    content_type="application/strategic-merge-patch+json")
                if status == 404:
                    node.gone = True
                    continue
                if status != 200:
                    raise RuntimeError(f"node {node.name} Ready: HTTP {status}: {out}")
                node.ready = True
            if now - node.lease_renewed >= 5.0:
                self._renew_lease(node)
                node.lease_renewed = now

    def _renew_lease(self, node: _Node) -> None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{node.name}"
        spec = {"holderIdentity": node.name, "leaseDurationSeconds": 40, "renewTime": _micro_now()}
        status, _ = self.plane.request("PATCH", path, {"spec": spec}, content_type="application/merge-patch+json")
        if status == 404:
            self.plane.request("POST", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", {
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": node.name, "namespace": "kube-node-lease"}, "spec": spec})

    # ----- pods ----------------------------------------------------------------------------------
    def _pods(self) -> None:
        for node in self.nodes.values():
            if node.gone:
                continue
            selector = quote(f"spec.nodeName={node.name}")
            status, out = self.plane.request("GET", f"/api/v1/pods?fieldSelector={selector}")
            if status != 200:
                raise RuntimeError(f"pods of {node.name}: HTTP {status}: {out}")
            for pod in out["items"]:
                meta = pod["metadata"]
                key = f"{meta['namespace']}/{meta['name']}"
                path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
                if meta.get("deletionTimestamp"):
                    self.plane.request("DELETE", path, {"gracePeriodSeconds": 0,
                                                        "preconditions": {"uid": meta["uid"]}})
                    continue
                if pod.get("status", {}).get("phase") == "Running":
                    continue
                conditions = [{"type": t, "status": "True", "lastTransitionTime": _now()}
                              for t in ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready")]
                containers = [{"name": c["name"], "image": c["image"], "imageID": "", "ready": True,
                               "restartCount": 0, "started": True, "containerID": f"containerd://{meta['uid']}",
                               "state": {"running": {"startedAt": _now()}}}
                              for c in pod["spec"]["containers"]]
                status, out = self.plane.request("PATCH", f"{path}/status", {"status": {
                    "phase": "Running", "conditions": conditions, "containerStatuses": containers,
                    "hostIP": "10.0.0.1", "podIP": "10.0.1.1", "startTime": _now()}},
                    content_type="application/strategic-merge-patch+json")
                if status == 200:
                    self.pods_started.add(key)
                elif status != 404:
                    raise RuntimeError(f"pod {key} Running: HTTP {status}: {out}")


