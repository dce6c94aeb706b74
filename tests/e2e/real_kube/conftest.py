"""End to end on the real control plane, in real time: the real handlers (provisioner, disruption,
interruption) against kube-apiserver with the shipped RBAC, EC2/SQS/DynamoDB on moto, the real
kube-scheduler binding pods and the real controllers (Deployment, ReplicaSet, DaemonSet, disruption, garbage
collector, node lifecycle) acting, and ``NodeAgent`` turning launched instances into nodes the way EKS nodes
do. Each scenario works in a namespace of its own and leaves no node behind."""

from __future__ import annotations

import contextlib
import copy
import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import yaml
from moto.server import ThreadedMotoServer

from autoscaler.adapters.clock import SystemClock
from autoscaler.adapters.kube.informer import ClusterCache
from autoscaler.app.ports import Clock
from autoscaler.config import ENV_CLAIMS_TABLE, ClusterConfig
from autoscaler.domain.fleet import CloudInstance
from autoscaler.handlers.runtime import ENV_KUBE_ENDPOINT, ENV_KUBE_TOKEN, Runtime, build_runtime, set_runtime
from autoscaler.metrics_catalog import RecordingSink
from simulator.local import CLAIMS_TABLE, PAUSE_IMAGE, AwsAccount, Catalog, LambdaContext, aws_account, demo_config
from tests import real_kube
from tests.e2e.real_kube.node_agent import NodeAgent
from tests.waiting import wait_for

RBAC_DIR = Path(__file__).resolve().parents[3] / "infra" / "rbac"
PENDING = "spec.nodeName=,status.phase!=Succeeded,status.phase!=Failed"
_counter = itertools.count()


def _guide_config() -> ClusterConfig:
    """clusters/demo.yaml (the guides' NodePool: spot, WhenEmpty), its empty nodes removed after 2 s instead
    of 30 s: the scenarios run in real time."""
    config = demo_config()
    pools = copy.deepcopy(list(config.node_pools))
    for pool in pools:
        pool["spec"]["disruption"]["consolidateAfter"] = "2s"
    return config.model_copy(update={"node_pools": pools})


GUIDE_CONFIG = _guide_config()


@dataclass
class RealCluster:
    account: AwsAccount
    plane: real_kube.ControlPlane
    agent: NodeAgent
    ns: str
    config: ClusterConfig
    _runtime: Runtime | None = None
    _caches: dict[str, ClusterCache | None] = field(default_factory=dict)

    # ----- the autoscaler (the real handlers, as the functions' identities) -----------------------------
    def runtime(self, *, clock: Clock | None = None) -> Runtime:
        rt = build_runtime(config=self.config, environ={
            ENV_KUBE_ENDPOINT: self.plane.url, ENV_KUBE_TOKEN: real_kube.IDENTITIES["provisioner"].token,
            ENV_CLAIMS_TABLE: CLAIMS_TABLE}, session=self.account.session, clock=clock or SystemClock(),
            sink=RecordingSink())
        rt.cloud.catalog.load(*self.account.catalog)
        set_runtime(rt)
        self._runtime = rt
        return rt

    def invoke(self, handler: Callable[[Any, Any], Any], event: Mapping[str, Any], *,
               function_name: str) -> Any:
        rt = self._runtime or self.runtime()
        rt.cluster.cache = self._caches.get(function_name)  # each function's own warm container
        try:
            return handler(dict(event), LambdaContext(remaining_ms=60_000, function_name=function_name))
        finally:
            self._caches[function_name] = rt.cluster.cache
            rt.cluster.cache = None

    def provision(self) -> dict[str, Any]:
        from autoscaler.handlers.provisioner import handler
        result: dict[str, Any] = self.invoke(handler, {"source": "schedule", "kind": "provisioner"},
                                             function_name="provisioner")
        return result

    def disrupt(self) -> dict[str, Any]:
        from autoscaler.handlers.disruption import handler
        result: dict[str, Any] = self.invoke(handler, {"source": "schedule", "kind": "disruption"},
                                             function_name="disruption")
        return result

    def instances(self) -> list[CloudInstance]:
        return (self._runtime or self.runtime()).cloud.owned_instances()

    def ec2_instances(self) -> list[dict[str, Any]]:
        """Every instance ever launched in this test's account, terminated ones too (duplicate launches)."""
        ec2 = self.account.session.client("ec2", region_name=self.config.region)
        return [i for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]]

    # ----- the cluster -----------------------------------------------------------------------------------
    def apply(self, path: str, obj: dict[str, Any]) -> Any:
        return self.plane.must("POST", path, obj)

    def deployment(self, name: str, replicas: int, *, cpu: str = "1", labels: Mapping[str, str] | None = None,
                   spec: Mapping[str, Any] | None = None) -> None:
        """A Deployment of pause pods (the guides' ``inflate``), created or scaled."""
        path = f"/apis/apps/v1/namespaces/{self.ns}/deployments"
        current = self.plane.request("GET", f"{path}/{name}")
        if current[0] == 200:
            self.plane.must("PATCH", f"{path}/{name}", {"spec": {"replicas": replicas}},
                            content_type="application/merge-patch+json")
            return
        match = {"app": name, **(labels or {})}
        self.apply(path, {"apiVersion": "apps/v1", "kind": "Deployment",
                          "metadata": {"name": name, "namespace": self.ns},
                          "spec": {"replicas": replicas, "selector": {"matchLabels": match},
                                   "template": {"metadata": {"labels": match}, "spec": {
                                       "terminationGracePeriodSeconds": 0,
                                       "containers": [{"name": name, "image": PAUSE_IMAGE,
                                                       "resources": {"requests": {"cpu": cpu}}}],
                                       **(spec or {})}}}})

    def pods(self, selector: str = "") -> list[dict[str, Any]]:
        query = f"?labelSelector={quote(selector)}" if selector else ""
        out: list[dict[str, Any]] = self.plane.must("GET", f"/api/v1/namespaces/{self.ns}/pods{query}")["items"]
        return out

    def nodes(self) -> list[dict[str, Any]]:
        ours = {n.name for n in self.agent.nodes.values()}
        return [n for n in self.plane.must("GET", "/api/v1/nodes")["items"] if n["metadata"]["name"] in ours]

    def running(self, selector: str, count: int) -> list[dict[str, Any]] | None:
        """The ``count`` pods of ``selector``, once every one is bound and Running (else None)."""
        pods = [p for p in self.pods(selector) if not p["metadata"].get("deletionTimestamp")]
        ok = len(pods) == count and all(p["spec"].get("nodeName") and p["status"].get("phase") == "Running"
                                        for p in pods)
        return pods if ok else None

    def scheduled_by_kube_scheduler(self, pods: list[dict[str, Any]]) -> None:
        """Every pod was bound by the real kube-scheduler: its Scheduled event names default-scheduler and the
        node the pod is on (the autoscaler's identity cannot bind: pods/binding is not in its ClusterRole)."""
        def bound() -> bool:
            events = self.plane.must("GET", f"/api/v1/namespaces/{self.ns}/events")["items"]
            by_pod = {e["involvedObject"]["name"]: e for e in events if e.get("reason") == "Scheduled"
                      and "default-scheduler" in (e.get("reportingComponent"), (e.get("source") or {}).get(
                          "component"))}
            return all(p["metadata"]["name"] in by_pod
                       and p["spec"]["nodeName"] in by_pod[p["metadata"]["name"]]["message"] for p in pods)
        wait_for(bound, timeout=30, what="the kube-scheduler's Scheduled events")

    def no_duplicate_launches(self) -> None:
        """One instance per node that registered: every launch was needed, none was made twice."""
        launched = self.ec2_instances()
        registered = {n.instance_id for n in self.agent.nodes.values()}
        assert len(launched) == len(registered) == len({i["InstanceId"] for i in launched}), (
            f"{len(launched)} instances launched, {len(registered)} registered")

    @contextlib.contextmanager
    def budget_kept(self, selector: str, min_available: int) -> Iterator[list[int]]:
        """No pod evicted against its PDB: while the block runs, the pods of ``selector`` that are Ready and
        not being deleted are sampled every 0.1 s and never fewer than ``min_available`` (the samples are
        yielded for the test to read)."""
        samples: list[int] = []
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                pods = self.pods(selector)
                samples.append(sum(1 for p in pods if not p["metadata"].get("deletionTimestamp") and any(
                    c.get("type") == "Ready" and c.get("status") == "True"
                    for c in p.get("status", {}).get("conditions") or ())))
                stop.wait(0.1)
        thread = threading.Thread(target=sample, name="budget-sampler", daemon=True)
        thread.start()
        try:
            yield samples
        finally:
            stop.set()
            thread.join(timeout=10)
        assert samples and min(samples) >= min_available, f"healthy pods went down to {min(samples)}"


@pytest.fixture
def real_cluster(moto_server: ThreadedMotoServer, local_catalog: Catalog) -> Iterator[RealCluster]:
    plane = real_kube.control_plane()
    docs = [d for f in sorted(RBAC_DIR.glob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d]
    plane.apply_manifest(docs)
    # Another test's pending pods would be this scenario's too: start from a cluster without any.
    wait_for(lambda: not plane.must("GET", f"/api/v1/pods?fieldSelector={quote(PENDING)}")["items"],
             what="no pending pod left by earlier tests")
    ns = f"e2e-{next(_counter)}-{int(time.time()) % 10**6}"
    plane.must("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
    wait_for(lambda: plane.request("GET", f"/api/v1/namespaces/{ns}/serviceaccounts/default")[0] == 200,
             what="the namespace's default ServiceAccount")
    with aws_account(GUIDE_CONFIG, catalog=local_catalog, moto_server=moto_server) as account:
        ec2 = account.session.client("ec2", region_name=account.config.region)
        agent = NodeAgent(plane, ec2, region=account.config.region).start()
        env = RealCluster(account=account, plane=plane, agent=agent, ns=ns, config=account.config)
        try:
            yield env
        finally:
            agent.stop()
            set_runtime(None)
            plane.request("DELETE", f"/api/v1/namespaces/{ns}")
            for node in agent.nodes.values():
                plane.request("DELETE", f"/api/v1/nodes/{node.name}")
            assert not agent.errors, agent.errors


def dump(obj: Any) -> str:
    return json.dumps(obj, indent=1, default=str)[:4000]
