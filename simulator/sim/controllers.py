"""Workload controllers for the simulation: Deployments (with the ReplicaSet folded in), DaemonSets and Jobs.

The emulator serves no Deployment or ReplicaSet objects (the autoscaler reads neither), so a
Deployment lives here: its pods carry an ownerReference to its ReplicaSet, as the real controller's
do. Reconciling follows the ReplicaSet controller: pods that are terminating, Succeeded or Failed do
not count, so an evicted pod is replaced at once; on scale-down the pods deleted first are the
unscheduled, then pending, then not-ready, then the newest ones.

DaemonSets are emulator objects (the autoscaler reads them for per-node overhead). Their controller
keeps one pod per node whose labels and taints the pod template accepts, pinned with the node-name
affinity term the real controller writes, and scheduled by kube-scheduler like any pod.

A Job keeps up to ``parallelism`` pods running until ``completions`` have succeeded; each pod's work
takes ``run_seconds`` once it is Running, after which it is Succeeded (and no longer holds its node).

PodDisruptionBudget status is computed by the emulator from the pods it selects (``kube_store``).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
from dataclasses import dataclass, field
from typing import Any

from simulator.kube_store import ApiError, Store, WatchEvent
from simulator.sim.engine import EventLoop
from simulator.sim.scheduler import required_node_affinity, untolerated_taint

Obj = dict[str, Any]
RECONCILE_DELAY = 0.5  # controllers act on the watch within a fraction of a second
# What the DaemonSet controller adds to every DaemonSet pod (pkg/controller/daemon/util).
DAEMON_TOLERATIONS = [
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
]


@dataclass
class Deployment:
    name: str
    namespace: str
    replicas: int
    template: Obj  # a pod template: {"metadata": {"labels": ...}, "spec": {...}}

    @property
    def rs_name(self) -> str:
        digest = hashlib.sha256(repr(self.template).encode()).hexdigest()[:10]
        return f"{self.name}-{digest}"

    @property
    def rs_uid(self) -> str:
        return f"uid-rs-{self.namespace}-{self.rs_name}"


@dataclass
class Job:
    name: str
    namespace: str
    completions: int
    parallelism: int
    run_seconds: float
    template: Obj
    # Completions are tracked on the Job (as its status does), not by counting pods: pod GC removes the
    # Succeeded pods of a deleted node.
    succeeded: int = 0

    @property
    def uid(self) -> str:
        return f"uid-job-{self.namespace}-{self.name}"


def _phase_rank(pod: Obj) -> int:
    return {"Pending": 0, "Unknown": 1, "Running": 2}.get((pod.get("status") or {}).get("phase", "Pending"), 2)


def _ready(pod: Obj) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or ())


def _counts(pod: Obj) -> bool:
    return not pod["metadata"].get("deletionTimestamp") and \
        (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


@dataclass
class Controllers:
    loop: EventLoop
    store: Store
    deployments: dict[tuple[str, str], Deployment] = field(default_factory=dict)
    jobs: dict[tuple[str, str], Job] = field(default_factory=dict)
    created: dict[str, float] = field(default_factory=dict)  # pod uid -> virtual creation time
    _serial: int = 0
    _pending: bool = False
    _finishing: set[str] = field(default_factory=set)  # Job pod uids whose work is under way

    # ----- Deployments ---------------------------------------------------------------------------
    def apply_deployment(self, deployment: Deployment) -> None:
        self.deployments[(deployment.namespace, deployment.name)] = deployment
        self.poke()

    def apply_job(self, job: Job) -> None:
        self.jobs[(job.namespace, job.name)] = job
        self.poke()

    def scale(self, namespace: str, name: str, replicas: int) -> None:
        try:
            self.deployments[(namespace, name)].replicas = replicas
        except KeyError:
            raise KeyError(f"scale: no Deployment {namespace}/{name} in the scenario") from None
        self.poke()

    def ready_pods(self, deployment: Deployment) -> int:
        """The Deployment's Ready pods that are not terminating (what an HPA's metrics come from)."""
        # The stored objects, not a serialized list: an HPA of thousands of pods syncs every 15 s.
        uid = deployment.rs_uid  # a hash of the template: once, not once per pod
        return sum(1 for p in self.store.view("pods")
                   if p["metadata"].get("namespace", "default") == deployment.namespace and _counts(p) and _ready(p)
                   and any(o.get("uid") == uid for o in p["metadata"].get("ownerReferences") or ()))

    def poke(self) -> None:
        """Reconcile soon (coalesced): the controllers' reaction to a watch event."""
        if not self._pending:
            self._pending = True
            self.loop.after(RECONCILE_DELAY, "controllers reconcile", self.reconcile)

    def observe(self, event: WatchEvent) -> None:
        if event.plural in ("nodes", "daemonsets"):
            self.poke()
        elif event.plural == "pods":
            owner = next(iter(event.obj["metadata"].get("ownerReferences") or ()), None)
            phase = (event.obj.get("status") or {}).get("phase")
            if owner and (event.type == "DELETED" or event.obj["metadata"].get("deletionTimestamp")
                          or phase == "Succeeded"):
                self.poke()
            if owner and owner.get("kind") == "Job" and phase == "Running" and event.type != "DELETED":
                self._work(event.obj, owner)

    def reconcile(self) -> None:
        self._pending = False
        pods = self.store.view("pods")
        owned: dict[str, list[Obj]] = {}
        for pod in pods:
            for ref in pod["metadata"].get("ownerReferences") or ():
                owned.setdefault(ref.get("uid", ""), []).append(pod)
        for dep in self.deployments.values():
            self._reconcile_deployment(dep, [p for p in owned.get(dep.rs_uid, []) if _counts(p)])
        self._reconcile_daemonsets(owned)
        for job in self.jobs.values():
            self._reconcile_job(job, owned.get(job.uid, []))

    def _reconcile_job(self, job: Job, pods: list[Obj]) -> None:
        done = job.succeeded
        active = sum(1 for p in pods if _counts(p))
        for _ in range(max(0, min(job.parallelism - active, job.completions - done - active))):
            spec = {**(job.template.get("spec") or {}), "restartPolicy": "Never"}
            self._create(job.namespace, {**job.template, "spec": spec}, prefix=f"{job.name}-",
                         owner={"apiVersion": "batch/v1", "kind": "Job", "name": job.name, "uid": job.uid,
                                "controller": True})

    def _work(self, pod: Obj, owner: Obj) -> None:
        """A Running Job pod finishes its work ``run_seconds`` later (Succeeded)."""
        uid = pod["metadata"].get("uid", "")
        job = next((j for j in self.jobs.values() if j.uid == owner.get("uid")), None)
        if job is None or uid in self._finishing:
            return
        self._finishing.add(uid)
        ns, name = pod["metadata"].get("namespace", "default"), pod["metadata"]["name"]

        def finish() -> None:
            with contextlib.suppress(ApiError):
                current = self.store.get("pods", ns, name)
                if current["metadata"].get("uid") == uid and not current["metadata"].get("deletionTimestamp"):
                    conditions = [c for c in (current.get("status") or {}).get("conditions") or ()
                                  if c.get("type") != "Ready"] + [{"type": "Ready", "status": "False"}]
                    self.store.patch("pods", ns, name, {"status": {"phase": "Succeeded", "conditions": conditions}})
                    job.succeeded += 1

        self.loop.after(job.run_seconds, f"job pod {ns}/{name} done", finish)

    def _reconcile_deployment(self, dep: Deployment, active: list[Obj]) -> None:
        missing = dep.replicas - len(active)
        rs_name, rs_uid = dep.rs_name, dep.rs_uid
        for _ in range(missing):
            self._create(dep.namespace, dep.template, prefix=f"{rs_name}-",
                         owner={"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs_name,
                                "uid": rs_uid, "controller": True})
        if missing < 0:
            doomed = sorted(active, key=lambda p: (bool((p.get("spec") or {}).get("nodeName")), _phase_rank(p),
                                                   _ready(p), _neg(p["metadata"].get("creationTimestamp", ""))))
            for pod in doomed[:-missing]:
                self._delete(pod)

    def _create(self, namespace: str, template: Obj, *, prefix: str, owner: Obj,
                extra_spec: Obj | None = None) -> None:
        meta = copy.deepcopy(template.get("metadata") or {})
        spec = copy.deepcopy(template.get("spec") or {})
        spec.update(extra_spec or {})
        while True:
            self._serial += 1
            suffix = hashlib.sha256(f"{prefix}{self._serial}".encode()).hexdigest()[:5]
            pod = {"metadata": {**meta, "name": f"{prefix}{suffix}", "namespace": namespace,
                                "ownerReferences": [owner]},
                   "spec": spec, "status": {"phase": "Pending"}}
            try:
                created = self.store.create("pods", pod)
                break
            except ApiError as exc:
                # generateName's 5 characters collide now and then over thousands of pods: the API server
                # answers AlreadyExists and the controller creates the pod again under another name.
                if exc.code != 409:
                    raise
        self.created[created["metadata"]["uid"]] = self.loop.now

    def _delete(self, pod: Obj) -> None:
        with contextlib.suppress(ApiError):
            self.store.delete("pods", pod["metadata"].get("namespace", "default"), pod["metadata"]["name"])

    # ----- DaemonSets ----------------------------------------------------------------------------
    def _reconcile_daemonsets(self, owned: dict[str, list[Obj]]) -> None:
        nodes = self.store.view("nodes")
        for ds in self.store.view("daemonsets"):
            template = ((ds.get("spec") or {}).get("template")) or {}
            spec = copy.deepcopy(template.get("spec") or {})
            spec["tolerations"] = [*(spec.get("tolerations") or ()), *DAEMON_TOLERATIONS]
            probe = {"metadata": template.get("metadata") or {}, "spec": spec}
            mine = [p for p in owned.get(ds["metadata"]["uid"], []) if _counts(p)]
            by_node = {self._pinned_node(p): p for p in mine}
            wanted = set()
            for node in nodes:
                name = node["metadata"]["name"]
                if not required_node_affinity(probe, node) or \
                        untolerated_taint(probe, (node.get("spec") or {}).get("taints") or ()) is not None:
                    continue
                wanted.add(name)
                if name not in by_node:
                    pin = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": [name]}]}]}}}}
                    self._create(ds["metadata"].get("namespace", "default"), {**template, "spec": spec},
                                 prefix=f"{ds['metadata']['name']}-",
                                 owner={"apiVersion": "apps/v1", "kind": "DaemonSet", "name": ds["metadata"]["name"],
                                        "uid": ds["metadata"]["uid"], "controller": True}, extra_spec=pin)
            for node_name, pod in by_node.items():
                if node_name not in wanted:
                    self._delete(pod)

    @staticmethod
    def _pinned_node(pod: Obj) -> str:
        terms = (((((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {})
                  .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or ())
        for term in terms:
            for f in term.get("matchFields") or ():
                if f.get("key") == "metadata.name" and f.get("values"):
                    return str(f["values"][0])
        return str((pod.get("spec") or {}).get("nodeName") or "")


def _neg(text: str) -> tuple[int, ...]:
    """Newest first when sorted ascending (RFC 3339 strings of one length compare as times)."""
    return tuple(-ord(ch) for ch in text)
