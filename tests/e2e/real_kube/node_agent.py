"""A node agent for the real control plane: it turns each EC2 instance the autoscaler launched (in moto) into
a Node the way an EKS node does, and runs the pods the real kube-scheduler binds to it.

- Registration (the kubelet started by nodeadm from the instance's user data): the Node is named by the
  instance's private DNS name, carries the ``--node-labels`` and ``--register-with-taints`` of the user
  data's NodeConfig, the labels the kubelet and the AWS cloud provider set (hostname, os, arch, instance
  type, zone, region) and ``providerID``; it registers NotReady and turns Ready ``ready_after`` seconds later.
- Capacity and allocatable from the EKS AMI's published definitions (``eks_node_facts``), computed from EC2's
  own instance-type data (DescribeInstanceTypes), never from ``autoscaler``.
- Heartbeats: a Lease in ``kube-node-lease`` renewed while the instance runs (the node lifecycle controller
  marks a node whose Lease stops as unreachable); none once the instance is terminated.
- Pods: a pod the scheduler bound here is reported Running and Ready; a pod being deleted is confirmed gone
  (what the kubelet does once its containers stopped; the pause containers stop at once).

Nothing here imports ``autoscaler``: it is a judge of the product.
"""

from __future__ import annotations

import base64
import email.parser
import email.policy
import logging
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import yaml

from tests.real_kube import ADMIN, ControlPlane

log = logging.getLogger(__name__)
MiB = 1024 * 1024
GiB = 1024 * MiB


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# ----- the EKS AMI's node facts (published definitions, independent of the product) ---------------------

def eks_max_pods(enis: int, ipv4_per_eni: int) -> int:
    """The EKS AMI's max pods without prefix delegation: ENIs x (IPv4 addresses per ENI - 1) + 2
    (amazon-eks-ami's eni-max-pods formula: one address per ENI is the ENI's own; + 2 host-network pods)."""
    return enis * (ipv4_per_eni - 1) + 2


def eks_kube_reserved_cpu_millis(vcpus: int) -> int:
    """The EKS AMI's kube-reserved CPU: 6% of the first core, 1% of the second, 0.5% of the third and fourth,
    0.25% of every core above four."""
    reserved = 0.0
    for core in range(1, vcpus + 1):
        reserved += 60 if core == 1 else 10 if core == 2 else 5 if core <= 4 else 2.5
    return int(reserved)


def eks_kube_reserved_memory_mib(max_pods: int) -> int:
    """The EKS AMI's kube-reserved memory: 11 MiB per pod the node may run, plus 255 MiB."""
    return 11 * max_pods + 255


EVICTION_HARD_MEMORY_MIB = 100  # kubelet's default memory.available<100Mi
KUBE_RESERVED_EPHEMERAL = 1 * GiB
ROOT_VOLUME = 20 * GiB  # the AMI's default root volume


def eks_node_facts(instance_type: dict[str, Any], max_pods: int | None = None) -> tuple[dict[str, str], dict[str, str]]:
    """(capacity, allocatable) of an EKS AL2023 node of ``instance_type`` (a DescribeInstanceTypes entry)."""
    vcpus = int(instance_type["VCpuInfo"]["DefaultVCpus"])
    memory_mib = int(instance_type["MemoryInfo"]["SizeInMiB"])
    net = instance_type["NetworkInfo"]
    pods = max_pods or eks_max_pods(int(net["MaximumNetworkInterfaces"]), int(net["Ipv4AddressesPerInterface"]))
    capacity = {"cpu": str(vcpus), "memory": f"{memory_mib}Mi", "pods": str(pods),
                "ephemeral-storage": str(ROOT_VOLUME)}
    alloc_cpu = vcpus * 1000 - eks_kube_reserved_cpu_millis(vcpus)
    alloc_mem = memory_mib - eks_kube_reserved_memory_mib(pods) - EVICTION_HARD_MEMORY_MIB
    # nodefs.available<10% is an eviction threshold on the root volume too.
    alloc_eph = ROOT_VOLUME - KUBE_RESERVED_EPHEMERAL - ROOT_VOLUME // 10
    allocatable = {"cpu": f"{alloc_cpu}m", "memory": f"{alloc_mem}Mi", "pods": str(pods),
                   "ephemeral-storage": str(alloc_eph)}
    return capacity, allocatable


# ----- the instance's user data, as nodeadm reads it ----------------------------------------------------

@dataclass(frozen=True)
class KubeletArgs:
    labels: dict[str, str]
    taints: list[dict[str, str]]
    max_pods: int | None


def kubelet_args(user_data: str) -> KubeletArgs:
    """The kubelet's labels, taints and maxPods from AL2023 user data (MIME multipart with NodeConfig parts,
    merged in order as nodeadm does: a later part's flags and config win)."""
    msg = email.parser.Parser(policy=email.policy.default).parsestr(user_data)
    labels: dict[str, str] = {}
    taints: list[dict[str, str]] = []
    max_pods: int | None = None
    for part in msg.iter_parts() if msg.is_multipart() else [msg]:
        if part.get_content_type() != "application/node.eks.aws":
            continue
        payload = part.get_payload(decode=True)  # an application/* part: bytes
        doc = yaml.safe_load(payload.decode() if isinstance(payload, bytes) else str(payload)) or {}
        kubelet = ((doc.get("spec") or {}).get("kubelet") or {})
        for flag in kubelet.get("flags") or ():
            name, _, value = str(flag).partition("=")
            if name == "--node-labels" and value:
                labels.update(dict(kv.split("=", 1) for kv in value.split(",")))
            elif name == "--register-with-taints" and value:
                taints = []
                for spec in value.split(","):
                    key_value, _, effect = spec.rpartition(":")
                    key, _, val = key_value.partition("=")
                    taints.append({"key": key, "effect": effect, **({"value": val} if val else {})})
        config = kubelet.get("config") or {}
        if config.get("maxPods"):
            max_pods = int(config["maxPods"])
    return KubeletArgs(labels, taints, max_pods)


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
        user_data = base64.b64decode((raw.get("UserData") or {}).get("Value") or "").decode()
        args = kubelet_args(user_data)
        it = self._instance_type(inst["InstanceType"])
        capacity, allocatable = eks_node_facts(it, args.max_pods)
        zone = inst["Placement"]["AvailabilityZone"]
        name = inst["PrivateDnsName"]
        arch = {"x86_64": "amd64", "arm64": "arm64"}[it["ProcessorInfo"]["SupportedArchitectures"][0]]
        labels = {**args.labels, "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                  "kubernetes.io/arch": arch, "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": arch,
                  "node.kubernetes.io/instance-type": inst["InstanceType"],
                  "topology.kubernetes.io/zone": zone, "topology.kubernetes.io/region": self.region}
        body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
                "spec": {"providerID": f"aws:///{zone}/{inst['InstanceId']}", "taints": args.taints},
                "status": {"capacity": capacity, "allocatable": allocatable,
                           "conditions": [self._ready_condition(False)],
                           "nodeInfo": {"architecture": arch, "operatingSystem": "linux",
                                        "kubeletVersion": "v1.37.2", "containerRuntimeVersion": "containerd://2.1",
                                        "kernelVersion": "6.1", "osImage": "Amazon Linux 2023",
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


__all__ = ["ADMIN", "KubeletArgs", "NodeAgent", "eks_node_facts", "kubelet_args"]
