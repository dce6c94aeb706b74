"""A scenario run: the local account and cluster (``simulator.local.LocalCluster``) in virtual time,
with the real provisioner and disruption handlers on their schedules, kube-scheduler, kubelets and
controllers around them, the scenario's timeline, and a record of what happened.

One thing runs at a time: the world's events on the loop's thread, each Lambda invocation and each of
its workers as a cooperative task (``sim/engine.py``) in its own execution environment
(``sim/containers.py``). After every event and every task's turn, an informer reads the emulator's change
log and turns API writes into reactions (kubelet starts and stops pods, controllers replace pods,
kube-scheduler is scheduled to run a moment later).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import random
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from moto.core import responses as moto_responses
from moto.ec2.models import amis as moto_amis
from moto.ec2.models import instances as moto_instances
from moto.moto_api._internal import mock_random
from moto.server import ThreadedMotoServer

from autoscaler.adapters.aws import _calls as aws_calls
from autoscaler.adapters.aws.replacement import wake_payload
from autoscaler.app import launcher
from autoscaler.config import ENV_PROVISIONER_FUNCTION, ClusterConfig
from autoscaler.handlers.disruption import handler as disruption_handler
from autoscaler.handlers.interruption import handler as interruption_handler
from autoscaler.handlers.observability import logger as handler_logger
from autoscaler.handlers.runtime import DEFAULT_K8S_VERSION
from autoscaler.metrics_catalog import RecordingSink
from simulator.kube_store import ApiError, WatchEvent
from simulator.local import Catalog, LocalCluster, _builtin_images, on_demand_prices, publish_image
from simulator.moto_server import MOTO_LOCK
from simulator.sim.baseline import BaselineSettings, ClusterAutoscaler
from simulator.sim.cloud import CloudWorld, InstanceRecord
from simulator.sim.containers import Containers
from simulator.sim.controllers import Controllers, Deployment, Job, StatefulSet
from simulator.sim.describe import FastDescribeInstances
from simulator.sim.engine import EventLoop, Invocation, VirtualClock
from simulator.sim.facts import (
    budget,
    clock_text,
    group_of,
    node_leaving,
    node_ready,
    owner_name,
    pool_of,
    taint_keys,
)
from simulator.sim.hpa import Autoscalers, Hpa
from simulator.sim.interruption import InterruptionQueue
from simulator.sim.kube_scheduler import KubeScheduler
from simulator.sim.kubelet import Kubelets, KubeletSettings
from simulator.sim.nodegroups import KarpenterNodeSet, ManagedNodeGroups, NodeGroup
from simulator.sim.platform import platform_for
from simulator.sim.scenario import Scenario, Step, Target
from simulator.sim.volumes import Volumes, VolumeSettings
from simulator.sim.watch import WakeUp, WatchTrigger

PLURALS = {"Pod": "pods", "Node": "nodes", "DaemonSet": "daemonsets", "PodDisruptionBudget": "poddisruptionbudgets",
           "PersistentVolume": "persistentvolumes", "PersistentVolumeClaim": "persistentvolumeclaims",
           "StorageClass": "storageclasses", "Namespace": "namespaces"}


PROVISIONER_FUNCTION = "autoscaler-provisioner"
SETTLE_ATTEMPTS = 50  # re-queues of a sample behind other events due at its time
# moto's answers on a loaded machine: slow, never a read timeout (botocore still names the endpoint after this).
WALL_READ_TIMEOUT_SECONDS = 600.0
ASYNC_INVOKE_DELAY = 0.2  # Lambda's async queue hands an event to the function within a fraction of a second


class _Accepted:
    status_code = 202
    headers: dict[str, str] = {}
    content = b""


@dataclass
class Sample:
    t: float
    pending_pods: int
    running_pods: int
    nodes: int
    ready_nodes: int
    instances: int
    dollars_per_hour: float
    nodes_by_pool: dict[str, int]
    nodes_by_capacity: dict[str, int]
    nodes_by_type: dict[str, int]
    # nodes by "pool/capacity type", dollars spent so far, and each workload's zone skew (max - min of its
    # running pods over the zones that have nodes)
    nodes_by_pool_capacity: dict[str, int] = field(default_factory=dict)
    dollars: float = 0.0
    zone_skew: dict[str, int] = field(default_factory=dict)


@dataclass
class Record:
    """What a run produced: the timeline, the samples and the raw facts the summary is computed from."""

    scenario: Scenario
    until: float
    policy: str = "autoscaler"
    provisioner_mode: str = "scheduled"  # the reaction in effect: scheduled, watch or watcher (sim/platform.py)
    schedules: dict[str, str] = field(default_factory=dict)  # the schedules used (provisioner, disruption)
    lambda_timeouts: dict[str, int] = field(default_factory=dict)  # invocations past their timeout, per function
    lambda_dropped: dict[str, int] = field(default_factory=dict)  # async events dropped after the max event age
    watch_batches: int = 0  # batches (unschedulable pods; nodes registering or Ready) that invoked the provisioner
    timeline: list[tuple[float, str, str]] = field(default_factory=list)
    # (time, kind, what): launch, termination, interruption, eviction, disruption; what windowed assertions
    # count and the report marks
    events: list[tuple[float, str, str]] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    instances: list[InstanceRecord] = field(default_factory=list)
    time_to_running: list[float] = field(default_factory=list)
    never_ran: int = 0
    evictions: int = 0
    pdb_violations: int = 0
    handler_errors: list[str] = field(default_factory=list)
    invocations: dict[str, int] = field(default_factory=dict)
    lambda_invocations: list[Invocation] = field(default_factory=list)  # every invocation that ran, in order of end
    foreign_sleeps: int = 0  # clock sleeps on threads the scheduler does not know (no virtual time passed)
    wall_seconds: float = 0.0
    handler_wall_seconds: float = 0.0  # wall time spent inside scheduled and async handler invocations
    handler_wall_by_function: dict[str, float] = field(default_factory=dict)
    events_processed: int = 0
    # DescribeInstances calls answered by the stand-in (sim/describe.py), instance answers it fetched
    describe_instances: dict[str, int] = field(default_factory=dict)
    # Running pods at the end by owner (Deployment or DaemonSet) and NodePool (or node group), with "total".
    placement: dict[str, dict[str, int]] = field(default_factory=dict)
    zones: dict[str, dict[str, int]] = field(default_factory=dict)  # Running pods at the end by owner and zone
    dead_letters: int = 0
    interrupted: int = 0
    capacity_errors: int = 0
    jobs: dict[str, int] = field(default_factory=dict)  # Job name -> pods Succeeded
    interruption_messages: dict[str, int] = field(default_factory=dict)  # handled, retried, deadLettered, pending
    scheduled_changes: dict[str, int] = field(default_factory=dict)  # named, movedBeforeStart, retiredByEc2
    # Nodes whose kubelet stopped: how many, and the fewest / most seconds from the stop to the instance's end.
    kubelet_stops: dict[str, float] = field(default_factory=dict)
    max_disrupting: dict[str, int] = field(default_factory=dict)  # pool -> most of its nodes disrupted at once
    images_at_end: dict[str, int] = field(default_factory=dict)  # our live instances on the newest AMI or older
    # initial.karpenterNodes: seeded, left (Nodes still there), stuck (deleting, held by a finalizer), terminated
    karpenter_nodes: dict[str, int] = field(default_factory=dict)
    volumes: dict[str, int] = field(default_factory=dict)  # attaches, detaches, forceDetaches (sim/volumes.py)


class Simulation:
    """One run. ``policy`` is ``autoscaler`` (the product's functions) or ``cluster-autoscaler`` (the
    baseline of ``sim/baseline.py`` on the same scenario, none of the product's functions running)."""

    def __init__(self, scenario: Scenario, env: LocalCluster, *, until: float | None = None,
                 policy: str = "autoscaler", baseline: BaselineSettings | None = None) -> None:
        self.scenario, self.env, self.policy = scenario, env, policy
        s = scenario.settings
        self.until = scenario.until if until is None else until
        self.loop = EventLoop(epoch=scenario.start.timestamp())
        self.clock = VirtualClock(self.loop)
        store = self.store = env.kube.store
        store.clock = self.clock.now
        store.graceful_deletion = True
        self.platform = platform = platform_for(scenario, env.config)
        self.loop.functions = dict(platform.functions)
        self.loop.on_timeout = self._timed_out
        self.record = Record(scenario, self.until, policy, provisioner_mode=platform.reaction,
                             schedules=platform.schedules() if policy == "autoscaler" else {})
        self.watch = WatchTrigger(self.loop, self._watch_batch, idle=platform.batch_idle_seconds,
                                  max=platform.batch_max_seconds, nodes=platform.reaction == "watcher") \
            if platform.watch_trigger and policy == "autoscaler" else None
        # Hooks go on the session before the runtime creates its clients (clients copy the session's hooks).
        self.cloud = CloudWorld(self.loop, env.config.region).install(env.session, catalog=env.catalog)
        self.cloud.claimed_pods = lambda: {c.instance_id: c.pods for c in self.env.runtime_claims() if c.instance_id}
        env.session.events.register("before-call.lambda.Invoke", self._async_invoke)
        self.describe = FastDescribeInstances(env.config.region, MOTO_LOCK, lambda: self.cloud.ec2).install(
            env.session.events)
        self.runtime = env.runtime(clock=self.clock, sink=RecordingSink(),
                                   environ={ENV_PROVISIONER_FUNCTION: PROVISIONER_FUNCTION}, in_process=True)
        self.kubelets = Kubelets(
            self.loop, store, self.cloud, {p.name: p for p in self.runtime.node_pools}, env.config.region,
            KubeletSettings(**{f: getattr(s, f) for f in KubeletSettings.__dataclass_fields__}))
        self.kubelets.log = self.log
        self.kubelets.user_data = self.describe.user_data
        env.context_clock = self.clock.monotonic  # a handler's remaining time runs on the virtual clock too
        self.volumes = Volumes(self.loop, store, VolumeSettings(
            s.volume_provision_seconds, s.volume_attach_seconds, s.volume_detach_seconds,
            s.volume_force_detach_seconds), log=self.log)
        self.kubelets.volumes = self.volumes
        self.controllers = Controllers(self.loop, store)
        icfg = env.config.interruption
        self.queue = InterruptionQueue(
            self.loop, self.cloud, self._invoke_interruption, env.config.region, batch_size=icfg.batch_size,
            max_concurrency=icfg.max_concurrency, visibility_timeout_seconds=icfg.timeout_seconds + 10,
            log=self.log)
        self.containers = Containers(self.loop, lambda: self.runtime)
        self.hpas = Autoscalers(self.loop, self.controllers, log=self.log)
        image = _builtin_images(env.config.region)["x86_64"]
        self.node_groups = ManagedNodeGroups(
            self.loop, store, self.cloud, self.runtime.cloud.instance_types, env.config.region,
            env.network.subnets, image, log=self.log)
        self.baseline = ClusterAutoscaler(self.loop, store, self.cloud, self.node_groups,
                                          self.runtime.cloud.instance_types, env.config.region, env.network.subnets,
                                          image, settings=baseline or BaselineSettings(), log=self.log,
                                          node_pools=lambda: self.runtime.node_pools,
                                          prices=lambda: on_demand_prices(env.config.region))
        self.scheduler = KubeScheduler(store, strategy=s.scoring)
        self.cloud.leaving = self._leaving
        self.cloud.displaced = self._displaced
        self.cloud.on_launch.append(self._launched)
        self.cloud.on_terminate.append(self._terminated)
        self._rv = store.resource_version
        self._scheduler_due = False
        self._pdb_healthy: dict[str, int] = {}
        self.newest_images: set[str] = set()  # the last AMI release's images (none: no release in the run)
        self._disrupting: dict[str, str] = {}  # node -> pool, for the nodes being disrupted now
        self._karpenter: list[str] = []  # Nodes seeded as Karpenter's (initial.karpenterNodes)
        self._wrap_evictions()

    # ----- the informer ----------------------------------------------------------------------------
    def _observe(self) -> None:
        try:
            changes = self.store.changes_since(self._rv)
        except ApiError:  # the change log was compacted: nothing incremental to do but carry on
            changes = []
        self._rv = self.store.resource_version
        if not changes:
            return
        reschedule, pods_changed = False, False
        for event in changes:
            self.kubelets.observe(event)
            self.volumes.observe(event)
            self.controllers.observe(event)
            if self.watch is not None:
                self.watch.observe(event)
            if event.plural in ("pods", "nodes", "persistentvolumeclaims"):
                reschedule = True
            pods_changed = pods_changed or event.plural == "pods"
            if event.plural == "nodes":
                self._note_node(event)
        if reschedule and not self._scheduler_due:
            self._scheduler_due = True
            self.loop.after(self.scenario.settings.scheduler_delay_seconds, "kube-scheduler", self._schedule)
        if pods_changed:
            self._check_pdbs()

    def _count_disrupting(self, event: WatchEvent) -> None:
        """The most nodes of each pool disrupted at once (announced for replacement, tainted
        ``karpenter.sh/disrupted``, cordoned or deleting), for the disruption budgets' assertions; kept
        per node change, so a budget exceeded between two samples is still seen."""
        node, name = event.obj, event.obj["metadata"]["name"]
        if event.type != "DELETED" and (node_leaving(node) or node["metadata"].get("deletionTimestamp")):
            if name not in self._disrupting:
                self.event("disruption", f"node {name} pool {pool_of(node)}")
            self._disrupting[name] = pool_of(node)
        else:
            self._disrupting.pop(name, None)
        pool = pool_of(node)
        now = sum(1 for p in self._disrupting.values() if p == pool)
        self.record.max_disrupting[pool] = max(now, self.record.max_disrupting.get(pool, 0))

    def _note_node(self, event: WatchEvent) -> None:
        self._count_disrupting(event)
        name = event.obj["metadata"]["name"]
        if event.type == "ADDED":
            self.log("kubelet", f"node {name} registered (taints: {taint_keys(event.obj)})")
        elif event.type == "DELETED":
            self.log("node", f"node {name} deleted")
        elif event.old is not None:
            was, now = node_ready(event.old), node_ready(event.obj)
            if was != now:
                self.log("kubelet", f"node {name} {'Ready' if now == 'True' else 'NotReady'}")
            gone = set(taint_keys(event.old).split(", ")) - set(taint_keys(event.obj).split(", "))
            for key in sorted(gone - {"node.kubernetes.io/not-ready", "none"}):
                self.log("node", f"node {name}: taint {key} removed")
            if not (event.old.get("spec") or {}).get("unschedulable") and (event.obj.get("spec") or {}).get(
                    "unschedulable"):
                self.log("node", f"node {name} cordoned")

    def _schedule(self) -> None:
        self._scheduler_due = False
        before = len(self.scheduler.bound)
        decisions = self.scheduler.run()
        bound = len(self.scheduler.bound) - before
        if bound:
            self.log("kube-scheduler", f"bound {bound} pod(s)")
        waiting = sum(1 for d in decisions if d.node is None)
        if waiting and bound:
            self.log("kube-scheduler", f"{waiting} pod(s) unschedulable")

    def _check_pdbs(self) -> None:
        """Count each disruption a budget did not allow: a pod going unhealthy (evicted, deleted, lost
        with its node) that leaves fewer healthy pods than the budget requires, with the disruption
        controller's arithmetic (expected pods = the controller's replicas; the emulator's own status
        counts the pods). A budget unmet because its Deployment grew is no violation."""
        pdbs = self.store.view("poddisruptionbudgets")
        if not pdbs:
            return
        pods = self.store.view("pods")
        scale = {d.rs_uid: d.replicas for d in self.controllers.deployments.values()}
        scale.update({st.uid: st.replicas for st in self.controllers.stateful_sets.values()})
        for pdb in pdbs:
            key = f"{pdb['metadata'].get('namespace')}/{pdb['metadata']['name']}"
            healthy, desired = budget(pdb, pods, scale)
            before = self._pdb_healthy.get(key)
            if before is not None and healthy < before and healthy < desired:
                self.record.pdb_violations += 1
                self.log("pdb", f"PodDisruptionBudget {key} broken: {healthy} healthy, {desired} required")
            self._pdb_healthy[key] = healthy

    def _wrap_evictions(self) -> None:
        evict = self.store.evict

        def counted(namespace: str, name: str, body: Any = None) -> Any:
            pod = self.store.peek("pods", namespace, name)
            node = (pod or {}).get("spec", {}).get("nodeName") or "?"
            result = evict(namespace, name, body)
            self.record.evictions += 1
            self.event("eviction", f"{namespace}/{name} from {node}")
            return result

        self.store.evict = counted  # type: ignore[method-assign]

    # ----- cloud -----------------------------------------------------------------------------------
    def _launched(self, r: InstanceRecord) -> None:
        inst = r.instance
        assert inst is not None
        dup = f" DUPLICATE of {r.duplicate_of}" if r.duplicate_of else ""
        self.event("launch", f"{r.instance_id} {inst.instance_type} {inst.capacity_type} {inst.zone}"
                             f" pool {inst.node_pool or '-'}")
        self.log("ec2", f"launched {r.instance_id} {inst.instance_type} {inst.capacity_type} {inst.zone} "
                        f"${r.hourly_price:.4f}/h {group_of(inst)}{dup}")

    def _leaving(self, r: InstanceRecord) -> bool:
        """Interrupted, or its node cordoned or tainted ``karpenter.sh/disrupted`` (a rebalance, a disruption)."""
        if r.interrupted:
            return True
        node = self.store.peek("nodes", None, r.node_name) if r.node_name is not None else None
        return node is not None and node_leaving(node)

    def _displaced(self, pod_key: str) -> bool:
        ns, _, name = pod_key.partition("/")
        pod = self.store.peek("pods", ns, name)
        if pod is None:
            return False
        node = (pod.get("spec") or {}).get("nodeName")
        if not node:
            return False
        record = next((r for r in self.cloud.instances.values() if r.node_name == node), None)
        if record is not None:
            return self._leaving(record)
        stored = self.store.peek("nodes", None, node)
        return stored is not None and node_leaving(stored)

    def _terminated(self, r: InstanceRecord) -> None:
        # The API writes the caller made before this TerminateInstances (a cordon, a drain) come first in the
        # timeline: read them now rather than after the caller's turn.
        self._observe()
        why = " (interrupted)" if r.interrupted else ""
        self.event("termination", f"{r.instance_id}{why} node {r.node_name or '-'}")
        self.log("ec2", f"terminated {r.instance_id}{why} after {clock_text(self.loop.now - r.launched_at)}")

    # ----- the Lambda functions --------------------------------------------------------------------
    def _async_invoke(self, params: dict[str, Any], **_: Any) -> tuple[Any, dict[str, Any]]:
        """lambda:Invoke with InvocationType=Event (a replacement request): Lambda queues it (HTTP 202)
        and runs the provisioner with the payload a moment later."""
        payload = json.loads(params.get("body") or b"{}")
        self.log("lambda", f"async invoke of the provisioner: {payload.get('kind')} for "
                           f"{', '.join(payload.get('nodes') or ()) or 'no node'} ({payload.get('source')})")
        self.loop.after(ASYNC_INVOKE_DELAY, "provisioner", lambda: self._invoke("provisioner", payload),
                        lambda_call=True)
        return _Accepted(), {"StatusCode": 202, "Payload": b""}

    def _watch_batch(self, wake: WakeUp) -> None:
        """A batch closed: the watcher invokes the provisioner asynchronously (queued behind a running
        invocation, as Lambda's async queue does with one invocation at a time) with the watcher function's
        payload, so the pass takes the warm-cache path as deployed (reaction watch: the in-process watch's)."""
        self.log("watch", f"{wake.reason}: provisioner invoked")
        payload = wake_payload(reason=wake.reason, pods=wake.pods, resource_version=wake.resource_version) \
            if self.platform.reaction == "watcher" else {"source": "watch"}
        self.loop.after(ASYNC_INVOKE_DELAY, "provisioner", lambda: self._invoke("provisioner", payload),
                        lambda_call=True)

    def _timed_out(self, ran: Invocation) -> None:
        """Lambda would have stopped an invocation that ran (in virtual time) past its timeout."""
        timeout = self.loop.functions[ran.function].timeout or 0.0
        took = ran.ended - ran.started
        self.record.lambda_timeouts[ran.function] = self.record.lambda_timeouts.get(ran.function, 0) + 1
        self.record.handler_errors.append(f"{clock_text(ran.started)} {ran.function}: ran {took:.0f} s, over its "
                                          f"{timeout:.0f} s timeout")
        self.log(ran.function, f"timed out: ran {took:.0f} s, Lambda would have stopped it at {timeout:.0f} s")

    def _invoke(self, name: str, payload: dict[str, Any] | None = None) -> None:
        self.record.invocations[name] = self.record.invocations.get(name, 0) + 1
        timeout_ms = int((self.loop.functions[name].timeout or 900.0) * 1000)
        try:
            if name == "provisioner":
                with self.containers.enter(name):
                    result = self.env.invoke_provisioner(payload, remaining_ms=timeout_ms)
                for p in result.get("passes") or ():
                    if p.get("planned") or p.get("failures") or (p.get("unschedulable") and p.get("pendingPods")):
                        self.log("provisioner", p.get("summary", ""))
            else:
                with self.containers.enter(name):
                    report = self.env.invoke(disruption_handler, {"source": "schedule", "kind": "disruption"},
                                             remaining_ms=timeout_ms, function_name="disruption")
                for d in report.get("decisions") or ():
                    self.log("disruption", f"{d['reason']}: {d['action']} {', '.join(d['nodes'])} "
                                           f"({d['pods']} pod(s), saving ${d['savingPerHour']:.4f}/h)")
        except Exception as exc:  # a failed invocation is a finding, not the end of the run
            self.record.handler_errors.append(f"{clock_text(self.loop.now)} {name}: {type(exc).__name__}: {exc}")
            self.log(name, f"invocation failed: {type(exc).__name__}: {exc}")

    def _invoke_interruption(self, event: dict[str, Any]) -> dict[str, Any]:
        self.record.invocations["interruption"] = self.record.invocations.get("interruption", 0) + 1
        timeout_ms = int((self.loop.functions["interruption"].timeout or 900.0) * 1000)
        try:
            with self.containers.enter("interruption"):
                result: dict[str, Any] = self.env.invoke(interruption_handler, event, remaining_ms=timeout_ms,
                                                         function_name="interruption")
        except Exception as exc:
            self.record.handler_errors.append(f"{clock_text(self.loop.now)} interruption: {type(exc).__name__}: {exc}")
            raise
        return result

    # ----- the scenario ----------------------------------------------------------------------------
    def _apply(self, manifest: dict[str, Any]) -> None:
        kind = manifest.get("kind", "")
        if kind == "Deployment":
            spec = manifest.get("spec") or {}
            meta = manifest.get("metadata") or {}
            self.controllers.apply_deployment(Deployment(meta["name"], meta.get("namespace", "default"),
                                                         int(spec.get("replicas", 1)), spec.get("template") or {}))
            return
        if kind == "StatefulSet":
            self.controllers.apply_stateful_set(StatefulSet.from_manifest(manifest))
            return
        plural = PLURALS.get(kind)
        if plural is None:
            raise ValueError(f"apply: kind {kind!r} is not simulated (use one of {', '.join(sorted(PLURALS))}, "
                             "Deployment, StatefulSet)")
        meta = manifest.get("metadata") or {}
        if self.store.exists(plural, meta.get("namespace"), meta.get("name", "")):
            self.store.replace(plural, meta.get("namespace"), meta["name"], manifest)
        else:
            self.store.create(plural, manifest)

    def _step(self, step: Step) -> None:
        if step.scale is not None:
            name = step.scale.deployment or step.scale.stateful_set or ""
            kind = "deployment" if step.scale.deployment else "statefulset"
            self.log("scenario", f"scale {kind} {name} to {step.scale.replicas}")
            self.controllers.scale(step.scale.namespace, name, step.scale.replicas)
        elif step.deployment is not None:
            d = step.deployment
            self.log("scenario", f"apply deployment {d.name} ({d.replicas} replicas)")
            self.controllers.apply_deployment(Deployment(d.name, d.namespace, d.replicas, d.pod_template()))
        elif step.apply is not None:
            self.log("scenario", f"apply {step.apply.get('kind')} {(step.apply.get('metadata') or {}).get('name')}")
            self._apply(step.apply)
        elif step.job is not None:
            j = step.job
            self.log("scenario", f"create job {j.name} ({j.completions} completions, {j.parallelism} at a time)")
            self.controllers.apply_job(Job(j.name, j.namespace, j.completions, j.parallelism, j.run_seconds,
                                           j.pod_template()))
        elif step.node_pools is not None:
            names = ", ".join((p.get("metadata") or {}).get("name", "?") for p in step.node_pools)
            self.log("scenario", f"apply NodePools {names}")
            self._reconfigure(step.node_pools)
        elif step.capacity is not None:
            self.cloud.unavailable = {o.key() for o in step.capacity.unavailable}
            self.log("scenario", "unavailable offerings now: "
                     + (", ".join("/".join(k) for k in sorted(self.cloud.unavailable)) or "none"))
        elif step.stop_kubelet is not None:
            k = step.stop_kubelet
            pick = self._picker(k)
            chosen = [r for r in sorted(self.cloud.live(), key=lambda r: r.instance_id)
                      if r.node_name and r.instance is not None and r.instance.node_pool
                      and r.instance_id not in self.kubelets.stopped
                      and k.node_pool in (None, r.instance.node_pool) and pick(r)][:k.count]
            for r in chosen:
                self.kubelets.stop(r)
            names = ", ".join(str(r.node_name) for r in chosen) or "no node"
            self.log("scenario", f"kubelet stops reporting on {names}{k.describe()}")
        elif step.terminate is not None:
            t = step.terminate
            pick = self._picker(t)
            chosen = [r for r in sorted(self.cloud.live(), key=lambda r: r.instance_id)
                      if r.instance is not None and t.node_pool in (None, r.instance.node_pool) and pick(r)][:t.count]
            self.log("scenario", f"EC2 terminates {', '.join(r.instance_id for r in chosen) or 'no instance'}"
                                 f"{t.describe()}")
            self.cloud.terminate([r.instance_id for r in chosen])
        elif step.new_ami is not None:
            images = publish_image(self.cloud.ec2, region=self.env.config.region, name=step.new_ami.name,
                                   k8s_version=self.runtime.config.kubernetes_version or DEFAULT_K8S_VERSION)
            self.newest_images = set(images.values())
            self.log("scenario", f"new AMI release {step.new_ami.name}: {', '.join(sorted(images.values()))}")
            if step.new_ami.cold_start:
                self._fresh_runtime(self.runtime.config)
                self.log("lambda", "the functions' execution environments replaced (their caches start empty)")
        elif step.load is not None:
            self.log("scenario", f"load on {step.load.deployment}: {step.load.cpu:g} CPU")
            self.hpas.set_load(step.load.namespace, step.load.deployment, step.load.cpu)
        elif step.interrupt is not None:
            i = step.interrupt
            ids = self.queue.interrupt(count=i.count, node_pool=i.node_pool, rebalance=i.rebalance,
                                       pick=self._picker(i))
            what = "rebalance recommendation for" if i.rebalance else "FIS: interrupt"
            for iid in ids:
                self.event("interruption", f"{iid} node {self.cloud.instances[iid].node_name or '-'}"
                                           f"{' (rebalance)' if i.rebalance else ''}")
            self.log("scenario", f"{what} {i.count} spot instance(s){i.describe()}: {', '.join(ids) or 'none'}")
        elif step.scheduled_change is not None:
            c = step.scheduled_change
            ids = self.queue.scheduled_change(count=c.count, start_in=c.start_in, node_pool=c.node_pool,
                                              pick=self._picker(c))
            self.log("scenario", f"AWS Health: EC2 scheduled change for {', '.join(ids) or 'no instance'}, "
                                 f"starting in {clock_text(c.start_in)}")
        elif step.shrink_node_group is not None:
            g = step.shrink_node_group
            self.log("scenario", f"shrink node group {g.name} to {g.size}")
            self.node_groups.shrink(g.name, g.size)
        elif step.delete is not None:
            self.log("scenario", f"delete {step.delete.kind} {step.delete.name}")
            if step.delete.kind == "Deployment":
                self.controllers.scale(step.delete.namespace, step.delete.name, 0)
            else:
                self.store.delete(PLURALS[step.delete.kind], step.delete.namespace, step.delete.name)

    def _picker(self, target: Target) -> Callable[[InstanceRecord], bool]:
        """Whether an instance matches a fault's ``node``, ``zone`` and ``owner`` (its node runs a pod of it)."""
        hosts: set[str] | None = None
        if target.owner:
            hosts = {p["spec"].get("nodeName", "") for p in self.store.view("pods")
                     if owner_name(p) == target.owner and p["spec"].get("nodeName")}

        def pick(r: InstanceRecord) -> bool:
            return ((target.node is None or r.node_name == target.node)
                    and (target.zone is None or (r.instance is not None and r.instance.zone == target.zone))
                    and (hosts is None or r.node_name in hosts))
        return pick

    def _reconfigure(self, node_pools: list[dict[str, Any]]) -> None:
        """New NodePools, as a redeploy of the functions would apply them: a fresh runtime (the handlers'
        warm state goes with the old container), the same account, claims table and cluster."""
        self._fresh_runtime(self.env.config.model_copy(update={"node_pools": node_pools}))

    def _fresh_runtime(self, config: ClusterConfig) -> None:
        self.runtime = self.env.runtime(clock=self.clock, sink=RecordingSink(), config=config,
                                        environ={ENV_PROVISIONER_FUNCTION: PROVISIONER_FUNCTION}, in_process=True)
        self.kubelets.node_pools = {p.name: p for p in self.runtime.node_pools}

    def _sample_settled(self, attempts: int = 0) -> None:
        """Sample once everything else due at this time has run (a launch, a binding at a sample's time is in
        that sample, not the next one); bounded, so a run that keeps adding events at one time still samples."""
        if attempts < SETTLE_ATTEMPTS and self.loop.busy_now():
            self.loop.after(0.0, "sample", lambda: self._sample_settled(attempts + 1))
            return
        self.sample()

    def sample(self) -> None:
        pods = self.store.view("pods")
        nodes = self.store.view("nodes")
        by_pool: dict[str, int] = {}
        by_capacity: dict[str, int] = {}
        by_type: dict[str, int] = {}
        by_pool_capacity: dict[str, int] = {}
        node_zone: dict[str, str] = {}
        for n in nodes:
            labels = n["metadata"].get("labels") or {}
            node_zone[n["metadata"]["name"]] = labels.get("topology.kubernetes.io/zone", "?")
            key = f"{pool_of(n)}/{labels.get('karpenter.sh/capacity-type', 'unknown')}"
            by_pool_capacity[key] = by_pool_capacity.get(key, 0) + 1
            itype = (n["metadata"].get("labels") or {}).get("node.kubernetes.io/instance-type", "unknown")
            by_type[itype] = by_type.get(itype, 0) + 1
            pool = pool_of(n)
            by_pool[pool] = by_pool.get(pool, 0) + 1
            cap = (n["metadata"].get("labels") or {}).get("karpenter.sh/capacity-type", "unknown")
            by_capacity[cap] = by_capacity.get(cap, 0) + 1
        pending, running, skew = _pod_counts(pods, node_zone)
        self.record.samples.append(Sample(
            t=self.loop.now, pending_pods=pending, running_pods=running, nodes=len(nodes),
            ready_nodes=sum(1 for n in nodes if node_ready(n) == "True"),
            instances=len(self.cloud.live()), dollars_per_hour=round(self.cloud.hourly_cost(), 6),
            nodes_by_pool=by_pool, nodes_by_capacity=by_capacity, nodes_by_type=by_type,
            nodes_by_pool_capacity=by_pool_capacity, dollars=round(self.cloud.dollars(self.loop.now), 6),
            zone_skew=skew))

    def log(self, source: str, text: str) -> None:
        self.record.timeline.append((self.loop.now, source, text))

    def event(self, kind: str, what: str) -> None:
        self.record.events.append((self.loop.now, kind, what))

    def run(self) -> Record:
        started = time.monotonic()
        s = self.scenario.settings
        self.loop.observer = self._observe
        self.cloud.unavailable = {o.key() for o in self.scenario.initial.unavailable}
        for r in self.scenario.initial.reservations:
            self.env.reservations.add(r.instance_type, r.zone, r.count, tags=r.tags, capacity_block=r.capacity_block)
        for g in self.scenario.initial.node_groups:
            self.node_groups.create(NodeGroup(g.name, g.instance_type, g.size, g.capacity_type, dict(g.labels)))
        for k in self.scenario.initial.karpenter_nodes:
            self._karpenter += self.node_groups.create_karpenter_nodes(
                KarpenterNodeSet(**k.model_dump()), cluster=self.env.config.cluster_name)
        for d in self.scenario.initial.deployments:
            self.controllers.apply_deployment(Deployment(d.name, d.namespace, d.replicas, d.pod_template()))
        for h in self.scenario.initial.hpas:
            self.hpas.add(Hpa(h.deployment, h.namespace, h.min_replicas, h.max_replicas, h.target_cpu_utilization))
        for manifest in self.scenario.initial.objects:
            self._apply(manifest)
        for step in self.scenario.timeline:
            self.loop.at(step.at, f"scenario step at {step.at:g}s", lambda st=step: self._step(st))  # type: ignore[misc]
        if self.policy == "cluster-autoscaler":
            self.baseline.start()
        else:
            p = self.platform
            self.loop.every(p.provisioner_period, "provisioner", lambda: self._invoke("provisioner"),
                            start=s.provisioner_offset_seconds, lambda_call=True)
            if p.disruption_period is not None:
                self.loop.every(p.disruption_period, "disruption", lambda: self._invoke("disruption"),
                                start=s.disruption_offset_seconds, lambda_call=True)
        self.loop.every(s.sample_seconds, "sample", self._sample_settled)
        self._observe()
        try:
            self.loop.run_until(self.until)
            self.sample()
            self._finish(started)
        finally:
            self.loop.close()
            self.containers.close()
        return self.record

    def _finish(self, started: float) -> None:
        rec = self.record
        rec.instances = list(self.cloud.instances.values())
        created, running = self.controllers.created, self.kubelets.running
        rec.time_to_running = sorted(running[uid] - t for uid, t in created.items() if uid in running)
        rec.never_ran = sum(1 for uid in created if uid not in running)
        rec.wall_seconds = time.monotonic() - started
        pools = {n["metadata"]["name"]: pool_of(n) for n in self.store.view("nodes")}
        zones = {n["metadata"]["name"]: (n["metadata"].get("labels") or {}).get("topology.kubernetes.io/zone", "?")
                 for n in self.store.view("nodes")}
        for pod in self.store.view("pods"):
            if (pod.get("status") or {}).get("phase") != "Running":
                continue
            name = owner_name(pod)
            where = rec.placement.setdefault(name, {"total": 0})
            pool = pools.get(pod["spec"].get("nodeName", ""), "(gone)")
            where[pool] = where.get(pool, 0) + 1
            where["total"] += 1
            by_zone = rec.zones.setdefault(name, {})
            zone = zones.get(pod["spec"].get("nodeName", ""), "?")
            by_zone[zone] = by_zone.get(zone, 0) + 1
        rec.events_processed = self.loop.processed
        rec.lambda_invocations = list(self.loop.invocations)
        rec.foreign_sleeps = self.loop.foreign_sleeps
        rec.handler_wall_by_function = {f: w for f, w in self.loop.wall_by_function.items()
                                        if f in self.loop.functions}
        rec.handler_wall_seconds = sum(rec.handler_wall_by_function.values())
        rec.lambda_dropped = dict(self.loop.dropped)
        rec.describe_instances = {"answered": self.describe.answered, "learned": self.describe.learned}
        rec.watch_batches = self.watch.batches if self.watch is not None else 0
        rec.dead_letters = len(self.queue.dead_letters)
        rec.capacity_errors = self.cloud.capacity_errors
        rec.jobs = {job.name: job.succeeded for job in self.controllers.jobs.values()}
        rec.interruption_messages = {**self.queue.outcomes, "deadLettered": len(self.queue.dead_letters),
                                     "pending": len(self.queue.messages)}
        rec.interrupted = sum(1 for r in self.cloud.instances.values() if r.interrupted)
        rec.scheduled_changes = self.queue.scheduled_outcomes()
        ends = [t - at for iid, at in self.kubelets.stopped.items()
                if (t := self.cloud.instances[iid].terminated_at) is not None]
        if self.newest_images:
            ours = [r for r in self.cloud.live() if r.instance is not None and r.instance.node_pool]
            newest = sum(1 for r in ours if r.instance is not None and r.instance.image_id in self.newest_images)
            rec.images_at_end = {"newest": newest, "older": len(ours) - newest}
        rec.volumes = {"attaches": self.volumes.attaches, "detaches": self.volumes.detaches,
                       "forceDetaches": self.volumes.force_detaches}
        rec.kubelet_stops = {"stopped": len(self.kubelets.stopped), "repaired": len(ends),
                             "secondsToRepairMin": min(ends, default=0.0),
                             "secondsToRepairMax": max(ends, default=0.0)}
        if self._karpenter:
            left = [n for n in self.store.view("nodes") if n["metadata"]["name"] in self._karpenter]
            rec.karpenter_nodes = {
                "seeded": len(self._karpenter), "left": len(left),
                "stuck": sum(1 for n in left if n["metadata"].get("deletionTimestamp")),
                "terminated": sum(1 for r in rec.instances if r.node_name in self._karpenter and not r.alive)}


def _pod_counts(pods: list[dict[str, Any]], node_zone: dict[str, str]) -> tuple[int, int, dict[str, int]]:
    """Pending pods (unbound, not deleting), Running pods, and each workload's zone skew (the most minus the
    fewest of its Running, non-deleting pods over the zones that have nodes), in one pass over the pods: a
    sample of a 5,000-pod cluster is taken every few virtual seconds."""
    zones = sorted(set(node_zone.values()))
    counts: dict[str, dict[str, int]] = {}
    pending = running = 0
    for pod in pods:
        meta, spec = pod["metadata"], pod["spec"]
        deleting = meta.get("deletionTimestamp")
        if not spec.get("nodeName") and not deleting:
            pending += 1
        if (pod.get("status") or {}).get("phase") != "Running":
            continue
        running += 1
        if deleting:
            continue
        zone = node_zone.get(spec.get("nodeName", ""))
        if zone is None:
            continue
        by_zone = counts.setdefault(owner_name(pod), dict.fromkeys(zones, 0))
        by_zone[zone] = by_zone.get(zone, 0) + 1
    skew = {owner: max(z.values()) - min(z.values()) for owner, z in sorted(counts.items()) if z}
    return pending, running, skew


@contextlib.contextmanager
def quiet_handlers() -> Iterator[None]:
    """The handlers' JSON logs are for CloudWatch; the simulation tells the story in its timeline."""
    level = handler_logger.log_level
    handler_logger.setLevel("ERROR")
    os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "1")
    os.environ.setdefault("POWERTOOLS_METRICS_NAMESPACE", "EKSServerlessAutoscaler")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        handler_logger.setLevel(level)


@contextlib.contextmanager
def no_wall_clock_timeouts() -> Iterator[None]:
    """The functions' AWS read timeout (10 s of wall time, for a Lambda talking to AWS) lifted for the run:
    in virtual time moto's answer arrives at once, however long a loaded machine takes to produce it, and a
    run must not tell another story because the machine was busy (a 500-node run's CreateFleet and claims
    transactions take seconds of moto's time)."""
    saved = aws_calls.READ_TIMEOUT_SECONDS
    aws_calls.READ_TIMEOUT_SECONDS = max(saved, WALL_READ_TIMEOUT_SECONDS)
    try:
        yield
    finally:
        aws_calls.READ_TIMEOUT_SECONDS = saved


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Draw what is random from ``seed`` for one run: moto's instance, volume and fleet ids, and the product's
    node-claim names (``secrets``, as Karpenter's NodeClaim names, which a simulation must be able to
    repeat). Everything else is already ordered by virtual time, so the same seed gives the same run."""
    mock_random.seed(seed)
    rng, ids = random.Random(seed), random.Random(seed + 1)
    # Instance, image and request ids from generators of their own: moto draws every request's id from its
    # shared generator, and how many requests a pass makes (cache refreshes, retries) must not move the ids
    # of the images and instances the timeline names.
    patches: list[tuple[object, str, object]] = [
        (launcher, "secrets", SimpleNamespace(choice=rng.choice)),
        (moto_instances, "random_instance_id", lambda: f"i-{ids.getrandbits(68):017x}"),
        (moto_amis, "random_ami_id", lambda: f"ami-{ids.getrandbits(68):017x}"),
        (moto_responses, "gen_amzn_requestid_long", _RequestIds()),
    ]
    saved = [(module, name, getattr(module, name)) for module, name, _ in patches]
    for module, name, value in patches:
        setattr(module, name, value)
    try:
        yield
    finally:
        for module, name, value in saved:
            setattr(module, name, value)


class _RequestIds:
    """moto's request-id generator, counting from 1 for each run (no random draw)."""

    def __init__(self) -> None:
        self._next = itertools.count(1)

    def __call__(self, headers: dict[str, Any] | None = None) -> str:
        request_id = f"{next(self._next):052d}"
        if isinstance(headers, dict):
            headers["x-amzn-requestid"] = request_id
        return request_id


def run_scenario(scenario: Scenario, *, until: float | None = None, moto_server: ThreadedMotoServer | None = None,
                 catalog: Catalog | None = None, policy: str = "autoscaler") -> Record:
    """Run ``scenario`` from a fresh account and cluster and return its record (``policy``: see Simulation)."""
    with quiet_handlers(), no_wall_clock_timeouts(), seeded(scenario.seed), \
            LocalCluster.start(scenario.cluster_config(), catalog=catalog, moto_server=moto_server) as env:
        raw = scenario.baseline.model_dump()
        baseline = BaselineSettings(**{**raw, "sizes": tuple(raw["sizes"])})
        return Simulation(scenario, env, until=until, policy=policy, baseline=baseline).run()
