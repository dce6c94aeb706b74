"""Workload controllers for the simulation: Deployments (with the ReplicaSet folded in), DaemonSets and Jobs.

The emulator serves no Deployment or ReplicaSet objects (the autoscaler reads neither), so a
Deployment lives here: its pods carry an ownerReference to its ReplicaSet, as the real controller's
do. Reconciling follows the ReplicaSet controller: pods that are terminating, Succeeded or Failed do
not count, so an evicted pod is replaced at once; on scale-down the pods deleted first are the
unscheduled, then pending, then not-ready, then the newest ones.

DaemonSets are emulator objects (the autoscaler reads them for per-node overhead). Their controller
keeps one pod per node whose labels and taints the pod template accepts, pinned with the node-name
affinity term the real controller writes, and scheduled by kube-scheduler like any pod.

A StatefulSet (apps/v1, served here like a Deployment) keeps pods ``<name>-0`` .. ``<name>-<n-1>``. With the
default ``podManagementPolicy: OrderedReady`` it creates ordinal i only once every lower ordinal is Running
and Ready, and removes the highest ordinal first, one at a time; ``Parallel`` creates and removes them all
at once. A pod that is gone is recreated under the same name once the old one has left the API. Each
``volumeClaimTemplates`` entry gives every ordinal its own PersistentVolumeClaim ``<template>-<name>-<i>``,
created before the pod and kept when the pod goes (the default ``Retain`` policy); the volume itself is
provisioned, attached and detached by ``sim/volumes.py``.

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
from simulator.sim.selectors import required_node_affinity, untolerated_taint

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
class StatefulSet:
    name: str
    namespace: str
    replicas: int
    template: Obj
    claim_templates: list[Obj] = field(default_factory=list)
    parallel: bool = False  # podManagementPolicy: Parallel

    @property
    def uid(self) -> str:
        return f"uid-sts-{self.namespace}-{self.name}"

    @classmethod
    def from_manifest(cls, manifest: Obj) -> StatefulSet:
        meta, spec = manifest.get("metadata") or {}, manifest.get("spec") or {}
        if not meta.get("name"):
            raise ValueError("StatefulSet: metadata.name is required")
        policy = spec.get("podManagementPolicy", "OrderedReady")
        if policy not in ("OrderedReady", "Parallel"):
            raise ValueError(f"StatefulSet {meta['name']}: podManagementPolicy {policy!r} is not OrderedReady "
                             "or Parallel")
        return cls(meta["name"], meta.get("namespace", "default"), int(spec.get("replicas", 1)),
                   spec.get("template") or {}, list(spec.get("volumeClaimTemplates") or ()), policy == "Parallel")

    def claim_name(self, template: Obj, ordinal: int) -> str:
        return f"{(template.get('metadata') or {}).get('name', 'data')}-{self.name}-{ordinal}"


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
    stateful_sets: dict[tuple[str, str], StatefulSet] = field(default_factory=dict)
    created: dict[str, float] = field(default_factory=dict)  # pod uid -> virtual creation time
    _serial: int = 0
    _pending: bool = False
    _finishing: set[str] = field(default_factory=set)  # Job pod uids whose work is under way

    # ----- Deployments ---------------------------------------------------------------------------
    def apply_deployment(self, deployment: Deployment) -> None:
        self.deployments[(deployment.namespace, deployment.name)] = deployment
        self.poke()

    def apply_stateful_set(self, sts: StatefulSet) -> None:
        self.stateful_sets[(sts.namespace, sts.name)] = sts
        self.poke()

    def apply_job(self, job: Job) -> None:
        self.jobs[(job.namespace, job.name)] = job
        self.poke()

    def scale(self, namespace: str, name: str, replicas: int) -> None:
        target = self.deployments.get((namespace, name)) or self.stateful_sets.get((namespace, name))
        if target is None:
            raise KeyError(f"scale: no Deployment or StatefulSet {namespace}/{name} in the scenario")
        target.replicas = replicas
        self.poke()

    def ready_pods(self, deployment: Deployment) -> int:
        """The Deployment's Ready pods that are not terminating (what an HPA's metrics come from)."""
        # The stored objects, not a serialized list: an HPA of thousands of pods syncs every 15 s.
        # The owner first: it rejects the other workloads' pods (most of them) before the condition scan.
        uid = deployment.rs_uid  # a hash of the template: once, not once per pod
        return sum(1 for p in self.store.view("pods")
                   if any(o.get("uid") == uid for o in p["metadata"].get("ownerReferences") or ())
                   and p["metadata"].get("namespace", "default") == deployment.namespace and _counts(p) and _ready(p))

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
            if owner and owner.get("kind") == "StatefulSet" and _ready(event.obj):
                self.poke()  # OrderedReady: the next ordinal may start
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
        for sts in self.stateful_sets.values():
            self._reconcile_stateful_set(sts, owned.get(sts.uid, []))
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

    def _reconcile_stateful_set(self, sts: StatefulSet, pods: list[Obj]) -> None:
        by_name = {p["metadata"]["name"]: p for p in pods}
        for ordinal in range(sts.replicas):
            name = f"{sts.name}-{ordinal}"
            pod = by_name.get(name)
            if pod is None:
                if self.store.peek("pods", sts.namespace, name) is not None:
                    return  # the old pod of that name is still leaving the API
                self._create_ordinal(sts, ordinal)
                if not sts.parallel:
                    return  # OrderedReady: one at a time
            elif not sts.parallel and not (_counts(pod) and _ready(pod)):
                return  # wait for this ordinal before the next
        extra = sorted((p for p in pods if _counts(p) and _ordinal(p) >= sts.replicas), key=_ordinal, reverse=True)
        for pod in extra if sts.parallel else extra[:1]:
            self._delete(pod)

    def _create_ordinal(self, sts: StatefulSet, ordinal: int) -> None:
        template = copy.deepcopy(sts.template)
        meta = template.setdefault("metadata", {})
        meta.setdefault("labels", {})["statefulset.kubernetes.io/pod-name"] = f"{sts.name}-{ordinal}"
        spec = template.setdefault("spec", {})
        spec.setdefault("hostname", f"{sts.name}-{ordinal}")
        volumes = [v for v in spec.get("volumes") or ()
                   if v.get("name") not in {(t.get("metadata") or {}).get("name") for t in sts.claim_templates}]
        for claim_template in sts.claim_templates:
            claim = sts.claim_name(claim_template, ordinal)
            if not self.store.exists("persistentvolumeclaims", sts.namespace, claim):
                self.store.create("persistentvolumeclaims", {
                    "apiVersion": "v1", "kind": "PersistentVolumeClaim",
                    "metadata": {"name": claim, "namespace": sts.namespace,
                                 "labels": dict((template.get("metadata") or {}).get("labels") or {})},
                    "spec": copy.deepcopy(claim_template.get("spec") or {}), "status": {"phase": "Pending"}})
            volumes.append({"name": (claim_template.get("metadata") or {}).get("name", "data"),
                            "persistentVolumeClaim": {"claimName": claim}})
        spec["volumes"] = volumes
        owner = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": sts.name, "uid": sts.uid, "controller": True}
        self._create(sts.namespace, template, prefix="", owner=owner, name=f"{sts.name}-{ordinal}")

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
                extra_spec: Obj | None = None, name: str | None = None) -> None:
        meta = copy.deepcopy(template.get("metadata") or {})
        spec = copy.deepcopy(template.get("spec") or {})
        spec.update(extra_spec or {})
        while True:
            self._serial += 1
            suffix = hashlib.sha256(f"{prefix}{self._serial}".encode()).hexdigest()[:5]
            pod = {"metadata": {**meta, "name": name or f"{prefix}{suffix}", "namespace": namespace,
                                "ownerReferences": [owner]},
                   "spec": spec, "status": {"phase": "Pending"}}
            try:
                created = self.store.create("pods", pod)
                break
            except ApiError as exc:
                # generateName's 5 characters collide now and then over thousands of pods: the API server
                # answers AlreadyExists and the controller creates the pod again under another name.
                if exc.code != 409 or name is not None:
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


def _ordinal(pod: Obj) -> int:
    tail = pod["metadata"]["name"].rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else -1


def _neg(text: str) -> tuple[int, ...]:
    """Newest first when sorted ascending (RFC 3339 strings of one length compare as times)."""
    return tuple(-ord(ch) for ch in text)
