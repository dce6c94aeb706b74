"""The interruption service and its batch algorithm (``app/interruption.py``, ``app/interruption_batch.py``) on the
in-memory port fakes, in virtual time: what a spot warning, a rebalance and a scheduled change do to our nodes
and instances, the retry of a drain that cannot finish, and NTH's switches (cordon-only, dry-run, excluded
nodes, grace periods, emptyDir and finished pods). The handler's wiring of the same is tested against moto and
the emulator in ``tests/handlers/``."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ParamSpec, TypeVar

import pytest

from autoscaler.adapters.clock import ManualClock
from autoscaler.app.drain import DrainOptions
from autoscaler.app.interruption import InterruptionService
from autoscaler.app.interruption_batch import DrainPools, InterruptionBatch, QueuedMessage
from autoscaler.app.ports import CloudError, ClusterError
from autoscaler.domain.keys import REPLACEMENT_REQUESTED_ANNOTATION
from autoscaler.domain.ownership import launch_tags
from autoscaler.metrics_catalog import RecordingSink
from simulator.kube_store import Store
from tests import kube_objects as ko
from tests.app.fakes import Replacements
from tests.app.fakes_cloud import FakeCloud
from tests.app.fakes_cluster import FakeCluster
from tests.events import load_event

P = ParamSpec("P")
R = TypeVar("R")
ZONE = "us-east-1a"
DISRUPTED = "karpenter.sh/disrupted"


class InlineExecutor(Executor):
    """Runs each task at once on the caller's thread: the batch's order, without threads, in virtual time."""

    def submit(self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> Future[R]:
        future: Future[R] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:
            future.set_exception(exc)
        return future


@dataclass
class World:
    clock: ManualClock
    cluster: FakeCluster
    cloud: FakeCloud
    replacements: Replacements
    service: InterruptionService
    sink: RecordingSink = field(default_factory=RecordingSink)
    _ids: itertools.count[int] = field(default_factory=itertools.count)

    def add_node(self, name: str, *, owned: bool = True, capacity_type: str = "spot",
                 labels: dict[str, str] | None = None) -> str:
        tags = launch_tags(cluster_name=self.cloud.cluster_name, node_pool="default", node_class="default",
                           claim_id=f"default-{name}") if owned else {"Name": "someone-else"}
        instance = self.cloud.run_instance("m5.large", ZONE, tags=tags, capacity_type="spot")
        raw = ko.node(name, labels={"node.kubernetes.io/instance-type": "m5.large", "topology.kubernetes.io/zone": ZONE,
                                    "karpenter.sh/capacity-type": capacity_type, **(labels or {})})
        raw["spec"]["providerID"] = f"aws:///{ZONE}/{instance.instance_id}"
        self.cluster.store.create("nodes", raw)
        return instance.instance_id

    def add_pod(self, name: str, node: str, **kwargs: Any) -> None:
        kwargs.setdefault("ready", True)
        self.cluster.store.create("pods", ko.pod(name, node=node, **kwargs))

    def node(self, name: str) -> dict[str, Any] | None:
        return self.cluster.store.peek("nodes", None, name)

    def pods_on(self, node: str) -> list[str]:
        pods = self.cluster.store.objects("pods")
        return sorted(f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in pods
                      if (p.get("spec") or {}).get("nodeName") == node)

    def state(self, instance_id: str) -> str:
        return self.cloud.instances[instance_id].state

    def event(self, name: str, *instance_ids: str, event_id: str = "") -> str:
        """A checked-in sample retargeted at ``instance_ids``, sent now (the clock's time)."""
        ev = load_event(name)
        ev["time"] = datetime.fromtimestamp(self.clock.now(), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        ev["id"] = event_id or f"event-{next(self._ids)}"
        detail = ev["detail"]
        if "instance-id" in detail:
            detail["instance-id"] = instance_ids[0]
            ev["resources"] = [f"arn:aws:ec2:us-east-1:123456789012:instance/{instance_ids[0]}"]
        if "affectedEntities" in detail:
            detail["affectedEntities"] = [{"entityValue": i} for i in instance_ids]
            ev["resources"] = list(instance_ids)
        return json.dumps(ev)

    def run(self, *bodies: str, remaining_seconds: float = 60.0) -> list[int]:
        """One invocation over a batch, as the handler wires it: the indexes of the messages returned for retry."""
        messages = [QueuedMessage(message_id=str(i), body=b) for i, b in enumerate(bodies)]
        end = self.clock.monotonic() + remaining_seconds
        inline = InlineExecutor()
        batch = InterruptionBatch(service=self.service, sink=self.sink, clock=self.clock,
                                  pools=DrainPools(nodes=inline, messages=inline, cordons=inline),
                                  remaining_seconds=lambda: end - self.clock.monotonic())
        batch.prepare(messages)
        failed = []
        for index, message in enumerate(messages):
            try:
                batch.process(message)
            except Exception:
                failed.append(index)
        batch.release()  # the invocation ends: the drains it holds go to the next one
        return failed


@pytest.fixture
def make() -> Callable[..., World]:
    def build(*, store: Store | None = None, **options: Any) -> World:
        clock = ManualClock(current=1_800_000_000.0)
        cluster = FakeCluster(store or Store(), clock=clock)
        cluster.store.clock = clock.now  # deletion timestamps in the service's time
        cloud = FakeCloud(cluster_name="demo", clock=clock)
        replacements = Replacements()
        drain = DrainOptions(**{k: options.pop(k) for k in ("grace_seconds", "delete_local_data", "delete_finished")
                                if k in options})
        service = InterruptionService(cluster=cluster, cloud=cloud, replacements=replacements, clock=clock,
                                      cluster_name="demo", poll_interval=0.5, retry_interval=5.0, drain_options=drain,
                                      **options)
        return World(clock=clock, cluster=cluster, cloud=cloud, replacements=replacements, service=service)
    return build


@pytest.fixture
def world(make: Callable[..., World]) -> World:
    return make()


def _workload(world: World, node: str) -> None:
    world.add_pod("web-1", node, labels={"app": "web"})
    world.add_pod("web-2", node, labels={"app": "web"})
    world.cluster.store.create("pods", ko.pod("coredns", namespace="kube-system", node=node, ready=True,
                                              priority_class="system-cluster-critical"))
    world.cluster.store.create("pods", ko.pod("node-agent", namespace="kube-system", node=node, ready=True,
                                              owner_kind="DaemonSet"))


def test_spot_warning_cordons_requests_replacement_drains_critical_pods_last_and_terminates_our_instance(
        world: World) -> None:
    iid = world.add_node("n1")
    _workload(world, "n1")
    world.cluster.store.create("poddisruptionbudgets", ko.pdb("web", match={"app": "web"}, max_unavailable=1))

    assert world.run(world.event("spot-interruption-warning", iid, event_id="spot-1")) == []

    assert world.node("n1") is None and world.state(iid) == "shutting-down"
    assert world.cluster.eviction_requests == ["default/web-1", "default/web-2", "kube-system/coredns"]
    assert world.pods_on("n1") == ["kube-system/node-agent"]
    assert world.replacements.requests == [{"source": "interruption", "kind": "replacement", "nodes": ["n1"],
                                            "unavailable": [["m5.large", ZONE, "spot"]], "eventId": "spot-1"}]
    assert [e["reason"] for e in world.cluster.events() if e["involvedObject"]["name"] == "n1"] == ["SpotInterrupted"]


def test_rebalance_taints_prefer_no_schedule_and_requests_capacity_without_draining(world: World) -> None:
    iid = world.add_node("n1")
    world.add_pod("web-1", "n1")
    assert world.run(world.event("rebalance-recommendation", iid)) == []
    node = world.node("n1")
    assert node is not None and not node["spec"].get("unschedulable")
    assert [(t["key"], t["effect"]) for t in node["spec"]["taints"]] == [(DISRUPTED, "PreferNoSchedule")]
    assert world.cluster.eviction_requests == [] and world.state(iid) == "running"
    assert len(world.replacements.requests) == 1


def test_scheduled_change_drains_every_instance_and_terminates_only_ours(world: World) -> None:
    ours, theirs = world.add_node("ours"), world.add_node("theirs", owned=False)
    world.add_pod("a", "ours")
    world.add_pod("b", "theirs")
    assert world.run(world.event("health-scheduled-change", ours, theirs)) == []
    assert world.node("ours") is None and world.state(ours) == "shutting-down"
    kept = world.node("theirs")
    assert kept is not None and kept["spec"]["unschedulable"] is True and world.state(theirs) == "running"
    assert world.pods_on("theirs") == []


def test_a_drain_blocked_by_a_pdb_is_retried_and_the_retry_continues_the_same_drain(world: World) -> None:
    iid = world.add_node("n1")
    world.add_pod("db-0", "n1", labels={"app": "db"})
    world.cluster.store.create("poddisruptionbudgets", ko.pdb("db", match={"app": "db"}, max_unavailable=0))
    body = world.event("spot-interruption-warning", iid)
    assert world.run(body, remaining_seconds=20) == [0]
    assert world.pods_on("n1") == ["default/db-0"] and world.state(iid) == "running"
    world.cluster.store.delete("poddisruptionbudgets", "default", "db")
    assert world.run(body) == []
    assert world.node("n1") is None and world.state(iid) == "shutting-down"
    assert len(world.replacements.requests) == 1  # the retry did not ask again


def test_duplicate_messages_are_harmless(world: World) -> None:
    iid = world.add_node("n1")
    world.add_pod("web-1", "n1")
    body = world.event("spot-interruption-warning", iid, event_id="dup")
    assert world.run(body, body) == []
    assert world.run(body) == []
    assert world.node("n1") is None and world.cluster.eviction_requests == ["default/web-1"]


def test_a_kubernetes_api_failure_returns_the_message_and_the_retry_finishes(world: World) -> None:
    iid = world.add_node("n1")
    body = world.event("spot-interruption-warning", iid)
    world.cluster.fail_next("cordon", ClusterError("PATCH node: HTTP 503 ServiceUnavailable", status=503), times=2)
    assert world.run(body) == [0]
    assert world.run(body) == []
    assert world.node("n1") is None


def test_a_failed_replacement_request_is_retried_and_the_node_stays_cordoned(world: World) -> None:
    iid = world.add_node("n1", owned=False)
    world.add_pod("web-1", "n1")
    # Not worth retrying inside the invocation (no such function): the message comes back.
    world.replacements.refusing = CloudError("lambda invoke: ResourceNotFoundException", status=404,
                                             code="ResourceNotFoundException")
    body = world.event("spot-interruption-warning", iid)
    assert world.run(body) == [0]
    world.replacements.refusing = None
    node = world.node("n1")
    assert node is not None and node["spec"]["unschedulable"] is True
    assert REPLACEMENT_REQUESTED_ANNOTATION not in (node["metadata"].get("annotations") or {})
    assert world.run(body) == []
    node = world.node("n1")
    assert node is not None and REPLACEMENT_REQUESTED_ANNOTATION in node["metadata"]["annotations"]
    assert [r["nodes"] for r in world.replacements.requests] == [["n1"]]


def test_a_throttled_replacement_request_never_stops_the_drain(world: World) -> None:
    iid = world.add_node("n1")
    world.add_pod("web-1", "n1")
    world.replacements.failures.extend([CloudError("lambda invoke: TooManyRequestsException", status=429,
                                                   code="TooManyRequestsException")] * 3)
    assert world.run(world.event("spot-interruption-warning", iid)) == []
    assert world.node("n1") is None and world.cluster.eviction_requests == ["default/web-1"]


# ----- NTH's switches (the cluster file's ``interruption`` section) ---------------------------------------

def test_cordon_only_cordons_and_asks_for_capacity_but_never_drains_or_terminates(make: Callable[..., World]) -> None:
    world = make(cordon_only=True)
    iid = world.add_node("n1")
    world.add_pod("web-1", "n1")
    assert world.run(world.event("spot-interruption-warning", iid)) == []
    node = world.node("n1")
    assert node is not None and node["spec"]["unschedulable"] is True
    assert world.cluster.eviction_requests == [] and world.state(iid) == "running"
    assert len(world.replacements.requests) == 1


def test_dry_run_changes_nothing(make: Callable[..., World]) -> None:
    world = make(dry_run=True)
    iid = world.add_node("n1")
    world.add_pod("web-1", "n1")
    assert world.run(world.event("spot-interruption-warning", iid)) == []
    node = world.node("n1")
    assert node is not None and not node["spec"].get("unschedulable") and not node["spec"].get("taints")
    assert world.cluster.eviction_requests == [] and world.replacements.requests == []
    assert world.state(iid) == "running"


def test_nodes_matching_the_exclude_labels_are_left_alone(make: Callable[..., World]) -> None:
    world = make(exclude_node_labels={"team": "payments"})
    excluded, other = world.add_node("pay", labels={"team": "payments"}), world.add_node("web")
    assert world.run(world.event("spot-interruption-warning", excluded),
                     world.event("spot-interruption-warning", other)) == []
    node = world.node("pay")
    assert node is not None and not node["spec"].get("unschedulable") and world.state(excluded) == "running"
    assert world.node("web") is None


def test_the_pod_termination_grace_period_overrides_each_pods_own(make: Callable[..., World]) -> None:
    world = make(store=Store(graceful_deletion=True), grace_seconds=7)
    iid = world.add_node("n1")
    world.add_pod("web-1", "n1", grace=120)
    world.run(world.event("spot-interruption-warning", iid), remaining_seconds=11)
    pod = world.cluster.store.get("pods", "default", "web-1")
    assert pod["metadata"]["deletionGracePeriodSeconds"] == 7


def test_the_node_termination_grace_period_bounds_one_nodes_drain(make: Callable[..., World]) -> None:
    world = make(store=Store(graceful_deletion=True), node_grace_seconds=1)  # the pod never finishes
    iid = world.add_node("n1")
    world.add_pod("web-1", "n1")
    start = world.clock.monotonic()
    assert world.run(world.event("spot-interruption-warning", iid), remaining_seconds=60) == [0]
    assert world.clock.monotonic() - start < 5  # virtual time: the bound, not the 50 s the invocation allowed


def test_without_delete_local_data_emptydir_pods_stay_and_the_drain_is_retried(make: Callable[..., World]) -> None:
    world = make(delete_local_data=False)
    iid = world.add_node("n1")
    world.add_pod("web-1", "n1")
    scratch = ko.pod("scratch", node="n1", ready=True)
    scratch["spec"]["volumes"] = [{"name": "tmp", "emptyDir": {}}]
    world.cluster.store.create("pods", scratch)
    assert world.run(world.event("spot-interruption-warning", iid), remaining_seconds=12) == [0]
    assert world.cluster.eviction_requests == ["default/web-1"] and world.pods_on("n1") == ["default/scratch"]


def test_finished_pods_are_deleted_when_asked(make: Callable[..., World]) -> None:
    world = make(delete_finished=True)
    iid = world.add_node("n1", owned=False)
    world.cluster.store.create("pods", ko.pod("job-done", node="n1", phase="Succeeded"))
    world.add_pod("web-1", "n1")
    assert world.run(world.event("spot-interruption-warning", iid)) == []
    assert world.pods_on("n1") == []
