"""Kubelets and the node lifecycle around them, in virtual time.

An instance that EC2 reports running boots and its kubelet registers the Node ``boot_seconds`` after
the launch, Ready=False with ``node.kubernetes.io/not-ready:NoSchedule``, the registration taint
``karpenter.sh/unregistered:NoExecute`` (from the user data's --register-with-taints) and the
NodePool's startupTaints; ``ready_seconds`` later it is Ready and loses not-ready. The defaults follow
published figures: AWS puts EC2 boot-to-kubelet-registration of EKS optimised AMIs at roughly 30 s
and node Ready (CNI up) about 10 s after ("How Karpenter scales", AWS containers blog, and Karpenter's
own scale-test dashboards report ~40-60 s launch-to-Ready for AL2023). Startup taints are removed
``startup_taint_seconds`` after Ready, standing in for the agent (a CNI, a security daemon) that owns them.

A bound pod is Running and Ready ``pod_start_seconds`` after binding (image pull of a small image). A
deleted pod terminates after min(its grace period, ``pod_stop_seconds``) (a process that exits on
SIGTERM). A terminated instance's kubelet stops: after ``node_monitor_grace_seconds`` (the node
lifecycle controller's 40 s) the Node is NotReady with ``node.kubernetes.io/unreachable:NoExecute``,
and ``node_delete_seconds`` after the termination the cloud node lifecycle controller deletes it; pods
bound to a Node that no longer exists are removed by pod garbage collection ``pod_gc_seconds`` later.

A kubelet can also stop reporting on an instance that keeps running (``stop``: a hung kubelet, a kernel
or network fault): the node lifecycle controller marks the Node Ready=Unknown with the unreachable
taint after the grace period, and its taint manager deletes the pods that do not tolerate the taint
``taint_eviction_seconds`` later (the 300 s toleration DefaultTolerationSeconds gives every pod that
has none of its own; DaemonSet pods tolerate it for ever). With no kubelet to confirm, those pods stay
Terminating until the Node goes; their controllers replace them meanwhile. Node repair is the
autoscaler's business.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from simulator import eks_node
from simulator.kube_store import ApiError, Store, WatchEvent, now_rfc3339
from simulator.local import NOT_READY_TAINT
from simulator.sim.cloud import CloudWorld, InstanceRecord
from simulator.sim.engine import EventLoop
from simulator.sim.selectors import tolerates

UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
VOLUME_RETRY_SECONDS = 2.0  # the kubelet's volume manager re-checks a pod's volumes this often
BASELINE_GROUP_TAG = "simulator/baseline-group"  # instances of the Cluster-Autoscaler baseline's groups
BASELINE_LABELS_TAG = "simulator/baseline-labels"  # JSON: the group's kubelet --node-labels
BASELINE_TAINTS_TAG = "simulator/baseline-taints"  # JSON: the group's kubelet --register-with-taints
BASELINE_NODEPOOL_TAG = "simulator/baseline-nodepool"  # the NodePool the baseline's group was made for


@dataclass
class KubeletSettings:
    boot_seconds: float = 30.0
    ready_seconds: float = 10.0
    startup_taint_seconds: float = 5.0
    pod_start_seconds: float = 3.0
    pod_stop_seconds: float = 2.0
    node_monitor_grace_seconds: float = 40.0
    node_delete_seconds: float = 60.0
    pod_gc_seconds: float = 5.0
    taint_eviction_seconds: float = 300.0


@dataclass
class Kubelets:
    loop: EventLoop
    store: Store
    cloud: CloudWorld
    node_pools: dict[str, Any]  # NodePool name -> its spec (read: startupTaints, for the agent that lifts them)
    region: str
    settings: KubeletSettings = field(default_factory=KubeletSettings)
    running: dict[str, float] = field(default_factory=dict)  # pod uid -> virtual time it became Running
    stopped: dict[str, float] = field(default_factory=dict)  # instance id -> when its kubelet stopped reporting
    log: Callable[[str, str], None] | None = None
    # instance id -> its user data (base64 or plain); default: EC2's DescribeInstanceAttribute userData
    user_data: Callable[[str], str | None] | None = None
    volumes: Any = None  # sim/volumes.Volumes: a pod with volumes starts once they are attached to its node
    _stopping: set[str] = field(default_factory=set)  # pod uids whose termination is scheduled
    _starting: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.cloud.on_launch.append(self._launched)
        self.cloud.on_terminate.append(self._terminated)

    # ----- nodes ---------------------------------------------------------------------------------
    def _launched(self, record: InstanceRecord) -> None:
        if record.node_name is not None or (record.instance is not None
                                            and "eks:nodegroup-name" in record.instance.tags):
            return  # a managed node group's or Karpenter's node: registered by simulator/sim/nodegroups.py
        self.loop.after(self.settings.boot_seconds, f"kubelet registers {record.instance_id}",
                        lambda: self._register(record))

    def _register(self, record: InstanceRecord) -> None:
        """The kubelet joins as the EKS AMI's bootstrap configures it from the instance's user data: the
        labels and taints it registers with and its kubelet settings come from there, capacity, allocatable
        and the well-known labels from the instance's EC2 data (``simulator/eks_node.py``)."""
        inst = record.instance
        if inst is None or not record.alive:
            return
        name = inst.private_dns_name or f"ip-{inst.instance_id}.ec2.internal"
        try:
            node = eks_node.node_from_user_data(
                self._user_data(inst.instance_id), eks_node.instance_info(inst.instance_type), name=name,
                zone=inst.zone, region=self.region, capacity_type=inst.capacity_type)
        except (eks_node.UserDataError, ValueError) as exc:
            if self.log:
                self.log("node", f"kubelet on {inst.instance_id} cannot join: {exc}")
            return
        labels = dict(node.labels)
        taints = [dict(t) for t in node.taints] + [{"key": NOT_READY_TAINT, "effect": "NoSchedule"}]
        group = inst.tags.get(BASELINE_GROUP_TAG)
        if group:
            # A Cluster Autoscaler node group's node: no Karpenter registration taint or labels; the group's
            # launch template passes kubelet --node-labels and --register-with-taints.
            taints = [t for t in taints if t["key"] == NOT_READY_TAINT]
            labels.pop("karpenter.sh/nodepool", None)
            labels["eks.amazonaws.com/nodegroup"] = group
            labels.update(json.loads(inst.tags.get(BASELINE_LABELS_TAG, "{}")))
            taints += json.loads(inst.tags.get(BASELINE_TAINTS_TAG, "[]"))
        manifest = {"metadata": {"name": name, "labels": labels},
                    "spec": {"providerID": inst.provider_id, "taints": taints},
                    "status": {**node.status(), "conditions": [self._condition("False")]}}
        try:
            self.store.create("nodes", manifest)
        except ApiError:
            return
        record.node_name = name
        self.loop.after(self.settings.ready_seconds, f"node {name} Ready", lambda: self._ready(record))

    def _user_data(self, instance_id: str) -> str | None:
        """The instance's user data as EC2 holds it (from its launch template, base64)."""
        if self.user_data is not None:
            return self.user_data(instance_id)
        answer = self.cloud.ec2.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")
        return (answer.get("UserData") or {}).get("Value")

    def _ready(self, record: InstanceRecord) -> None:
        name = record.node_name
        if name is None or not record.alive or not self.store.exists("nodes", None, name):
            return
        node = self.store.get("nodes", None, name)
        taints = [t for t in node["spec"].get("taints") or () if t.get("key") != NOT_READY_TAINT]
        self.store.patch("nodes", None, name, {"spec": {"taints": taints},
                                                "status": {"conditions": [self._condition("True")]}})
        pool = self.node_pools.get(record.instance.node_pool if record.instance else "")
        if pool and pool.startup_taints:
            keys: set[tuple[str, str]] = {(t.key, str(t.effect)) for t in pool.startup_taints}
            self.loop.after(self.settings.startup_taint_seconds, f"startup taints off {name}",
                            lambda: self._drop_taints(name, keys))

    def _drop_taints(self, name: str, keys: set[tuple[str, str]]) -> None:
        if not self.store.exists("nodes", None, name):
            return
        node = self.store.get("nodes", None, name)
        taints = [t for t in node["spec"].get("taints") or () if (t.get("key"), t.get("effect")) not in keys]
        self.store.patch("nodes", None, name, {"spec": {"taints": taints}})

    def _terminated(self, record: InstanceRecord) -> None:
        self.loop.after(self.settings.node_monitor_grace_seconds, f"node of {record.instance_id} NotReady",
                        lambda: self._not_ready(record))
        self.loop.after(self.settings.node_delete_seconds, f"node of {record.instance_id} deleted",
                        lambda: self._delete_node(record))

    def _not_ready(self, record: InstanceRecord) -> None:
        name = record.node_name
        if name is None or not self.store.exists("nodes", None, name):
            return
        node = self.store.get("nodes", None, name)
        taints = [t for t in node["spec"].get("taints") or () if t.get("key") != UNREACHABLE_TAINT]
        taints.append({"key": UNREACHABLE_TAINT, "effect": "NoExecute"})
        self.store.patch("nodes", None, name, {"spec": {"taints": taints},
                                                "status": {"conditions": [self._condition("Unknown")]}})

    def _condition(self, status: str) -> dict[str, str]:
        """The Ready condition as kubelet and the node lifecycle controller write it: node repair reads how
        long a node has been unhealthy from ``lastTransitionTime``."""
        return {"type": "Ready", "status": status, "lastTransitionTime": now_rfc3339(self.store.clock())}

    # ----- a kubelet that stops reporting on a running instance ----------------------------------
    def stop(self, record: InstanceRecord) -> None:
        """The kubelet of ``record``'s node stops: no status, no pod starts or stops from now on."""
        self.stopped[record.instance_id] = self.loop.now
        self.loop.after(self.settings.node_monitor_grace_seconds, f"node of {record.instance_id} NotReady",
                        lambda: self._unreachable(record))

    def _unreachable(self, record: InstanceRecord) -> None:
        if not record.alive:
            return  # terminated meanwhile: ``_terminated`` has it
        self._not_ready(record)
        name = record.node_name
        if name is not None:
            self.loop.after(self.settings.taint_eviction_seconds, f"taint manager evicts pods of {name}",
                            lambda: self._taint_evict(name))

    def _taint_evict(self, node_name: str) -> None:
        """The taint manager's NoExecute eviction: delete the node's pods whose tolerations of the
        unreachable taint (or the default 300 s one) have run out; those tolerating it for ever stay."""
        taint = {"key": UNREACHABLE_TAINT, "effect": "NoExecute"}
        evicted = 0
        for pod in self.store.list("pods", field_selector=f"spec.nodeName={node_name}"):
            own = [t for t in (pod.get("spec") or {}).get("tolerations") or () if tolerates(t, taint)]
            if pod["metadata"].get("deletionTimestamp") or (
                    own and any(t.get("tolerationSeconds") is None for t in own)):
                continue
            with contextlib.suppress(ApiError):
                self.store.delete("pods", pod["metadata"].get("namespace", "default"), pod["metadata"]["name"])
                evicted += 1
        if self.log and evicted:
            self.log("node", f"taint manager: {evicted} pod(s) of unreachable node {node_name} deleted "
                             "(Terminating until the node goes)")

    def _silent(self, node_name: str | None) -> bool:
        """Whether the kubelet of ``node_name`` stopped reporting (its pods neither start nor stop)."""
        return node_name is not None and any(
            r.node_name == node_name for r in (self.cloud.instances.get(i) for i in self.stopped) if r is not None)

    def _delete_node(self, record: InstanceRecord) -> None:
        name = record.node_name
        if name is not None and self.store.exists("nodes", None, name):
            self.store.delete("nodes", None, name)

    # ----- pods (driven by the store's change log) -----------------------------------------------
    def observe(self, event: WatchEvent) -> None:
        if event.plural == "pods":
            self._pod_changed(event)
        elif event.plural == "nodes" and event.type == "DELETED":
            name = event.obj["metadata"]["name"]
            self.loop.after(self.settings.pod_gc_seconds, f"pod GC for {name}", lambda: self._collect(name))

    def _pod_changed(self, event: WatchEvent) -> None:
        pod = event.obj
        meta, spec = pod["metadata"], pod.get("spec") or {}
        uid = meta.get("uid", "")
        if event.type == "DELETED":
            self._stopping.discard(uid)
            self._starting.discard(uid)
            return
        if meta.get("deletionTimestamp"):
            if uid not in self._stopping and not self._silent(spec.get("nodeName")):
                self._stopping.add(uid)
                grace = meta.get("deletionGracePeriodSeconds")
                grace = spec.get("terminationGracePeriodSeconds", 30) if grace is None else grace
                delay = min(float(grace), self.settings.pod_stop_seconds) if spec.get("nodeName") else 0.0
                ns, name = meta.get("namespace", "default"), meta["name"]
                self.loop.after(delay, f"pod {ns}/{name} stopped", lambda: self._remove(ns, name, uid))
            return
        phase = (pod.get("status") or {}).get("phase")
        if spec.get("nodeName") and phase == "Pending" and uid not in self._starting:
            self._starting.add(uid)
            ns, name = meta.get("namespace", "default"), meta["name"]
            self.loop.after(self.settings.pod_start_seconds, f"pod {ns}/{name} started",
                            lambda: self._start(ns, name, uid))

    def _start(self, ns: str, name: str, uid: str) -> None:
        pod = self.store.peek("pods", ns, name)
        if pod is None:
            return
        if pod["metadata"].get("uid") != uid or pod["metadata"].get("deletionTimestamp"):
            return
        node = pod["spec"].get("nodeName")
        if not node or not self.store.exists("nodes", None, node) or self._silent(node):
            return
        if self.volumes is not None:
            wait = self.volumes.ready_in(pod, node)
            if wait is None or wait > 0:  # volumes not attached yet: containers wait for them
                self.loop.after(VOLUME_RETRY_SECONDS if wait is None else wait, f"pod {ns}/{name} volumes",
                                lambda: self._start(ns, name, uid))
                return
        self.store.set_pod_ready(ns, name, echo=False)
        self.running[uid] = self.loop.now

    def _remove(self, ns: str, name: str, uid: str) -> None:
        with contextlib.suppress(ApiError):
            self.store.delete("pods", ns, name, grace_period_seconds=0, precondition_uid=uid)

    def _collect(self, node_name: str) -> None:
        if self.store.exists("nodes", None, node_name):
            return
        for pod in self.store.list("pods", field_selector=f"spec.nodeName={node_name}"):
            self._remove(pod["metadata"].get("namespace", "default"), pod["metadata"]["name"],
                         pod["metadata"].get("uid", ""))
