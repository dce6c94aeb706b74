"""The node lifecycle sweep (``app/lifecycle.reconcile``): registration time-outs, registration (labels, then the
unregistered taint, then initialisation), Nodes whose instance is gone, unused launch templates and dry-run, on
the in-memory port fakes (held to the adapters' contract in ``tests/adapters/contract/``)."""

from __future__ import annotations

from typing import Any

import pytest

from autoscaler.adapters.clock import ManualClock
from autoscaler.app.lifecycle import LifecycleResult, reconcile
from autoscaler.domain.models import UNREGISTERED_TAINT
from autoscaler.domain.nodepool import parse_node_pools
from autoscaler.domain.ownership import launch_tags
from simulator.kube_store import Store
from tests.app.fakes_cloud import FakeCloud
from tests.app.fakes_cluster import FakeCluster

POOLS = {p.name: p for p in parse_node_pools([{
    "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
    "spec": {"template": {"metadata": {"labels": {"intent": "apps"}},
                          "spec": {"nodeClassRef": {"name": "default"}, "requirements": []}}},
}])}
HOUR = 3600.0
TEMPLATE = "eks-autoscaler/prod/abc"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(current=1_800_000_000.0)


@pytest.fixture
def cloud(clock: ManualClock) -> FakeCloud:
    return FakeCloud(cluster_name="prod", clock=clock)


@pytest.fixture
def kube(clock: ManualClock) -> FakeCluster:
    return FakeCluster(Store(clock=clock.now), clock=clock)


def launch(cloud: FakeCloud, *, owned: bool = True) -> str:
    tags = launch_tags(cluster_name="prod", node_pool="default", node_class="default", claim_id="default-abc") \
        if owned else {"Name": "someone-else"}
    return cloud.run_instance("m5.xlarge", "us-east-1a", tags=tags, state="pending", capacity_type="spot").instance_id


def node_for(instance_id: str, *, name: str = "n1", ours: bool = True, taint: bool = True) -> dict[str, Any]:
    labels = {"kubernetes.io/hostname": name, "node.kubernetes.io/instance-type": "m5.xlarge",
              "topology.kubernetes.io/zone": "us-east-1a", **({"karpenter.sh/nodepool": "default"} if ours else {})}
    return {"metadata": {"name": name, "labels": labels},
            "spec": {"providerID": f"aws:///us-east-1a/{instance_id}",
                     "taints": [{"key": UNREGISTERED_TAINT.key, "effect": "NoExecute"}] if taint else []},
            "status": {"allocatable": {"cpu": "4", "memory": "15Gi", "pods": "58"}}}


def sweep(kube: FakeCluster, cloud: FakeCloud, *, now: float, dry_run: bool = False,
          release_finalizers: tuple[str, ...] = ()) -> LifecycleResult:
    return reconcile(cluster=kube, cloud=cloud, nodes=kube.nodes(), owned=cloud.owned_instances(), node_pools=POOLS,
                     now=now, dry_run=dry_run, release_finalizers=release_finalizers)


@pytest.mark.parametrize(("age_minutes", "terminated"), [(5, False), (14.9, False), (15, True), (60, True)])
def test_registration_timeout(kube: FakeCluster, cloud: FakeCloud, clock: ManualClock, age_minutes: float,
                              terminated: bool) -> None:
    iid = launch(cloud)
    result = sweep(kube, cloud, now=clock.now() + age_minutes * 60)
    assert (result.timed_out == [iid]) is terminated
    assert (("m5.xlarge", "us-east-1a", "spot") in cloud.unavailable()) is terminated
    assert (cloud.instances[iid].state in ("shutting-down", "terminated")) is terminated


def test_registered_instance_is_never_timed_out(kube: FakeCluster, cloud: FakeCloud, clock: ManualClock) -> None:
    kube.store.create("nodes", node_for(launch(cloud)))
    assert sweep(kube, cloud, now=clock.now() + HOUR).timed_out == []


def test_registered_node_gets_labels_then_loses_the_unregistered_taint(kube: FakeCluster, cloud: FakeCloud,
                                                                       clock: ManualClock) -> None:
    kube.store.create("nodes", node_for(launch(cloud)))
    result = sweep(kube, cloud, now=clock.now() + 60)
    node = kube.store.get("nodes", None, "n1")
    assert result.untainted == ["n1"] and not node["spec"].get("taints")
    labels = node["metadata"]["labels"]
    assert labels["intent"] == "apps" and labels["karpenter.sh/capacity-type"] == "spot"
    assert labels["karpenter.k8s.aws/instance-family"] == "m5" and labels["karpenter.sh/nodepool"] == "default"
    assert not sweep(kube, cloud, now=clock.now() + 60).changed  # idempotent


@pytest.mark.parametrize(("ours", "reclaimed", "deleted"), [
    (True, True, True),    # our node, instance gone: delete the Node object
    (True, False, False),  # our node, instance running: keep
    (False, True, False),  # not ours (no NodePool label, not our instance): never touched
])
def test_node_whose_instance_is_gone(kube: FakeCluster, *, cloud: FakeCloud, clock: ManualClock, ours: bool,
                                     reclaimed: bool, deleted: bool) -> None:
    iid = launch(cloud, owned=ours)
    kube.store.create("nodes", node_for(iid, ours=ours, taint=False))
    if reclaimed:
        cloud.reclaim(iid)
    result = sweep(kube, cloud, now=clock.now())
    assert (result.deleted_nodes == ["n1"]) is deleted
    assert kube.store.exists("nodes", None, "n1") is not deleted


def test_an_adopted_karpenter_node_whose_instance_is_gone_is_deleted_despite_its_finalizer(
        kube: FakeCluster, cloud: FakeCloud, clock: ManualClock) -> None:
    iid = launch(cloud, owned=False)
    body = node_for(iid, taint=False)
    body["metadata"]["finalizers"] = ["karpenter.sh/termination"]
    kube.store.create("nodes", body)
    cloud.reclaim(iid)
    result = sweep(kube, cloud, now=clock.now(), release_finalizers=("karpenter.sh/termination",))
    assert result.deleted_nodes == ["n1"] and not kube.store.exists("nodes", None, "n1")


def test_node_with_unknown_instance_id_is_deleted(kube: FakeCluster, cloud: FakeCloud, clock: ManualClock) -> None:
    kube.store.create("nodes", node_for("i-0123456789abcdef0", taint=False))
    assert sweep(kube, cloud, now=clock.now()).deleted_nodes == ["n1"]


@pytest.mark.parametrize(("age", "used_ago", "deleted"), [
    (2 * HOUR, None, True),     # old and not used by this container: delete
    (10 * 60, None, False),     # young: keep (a launch may be about to use it)
    (2 * HOUR, 60.0, False),    # used a minute ago: keep
    (2 * HOUR, 2 * HOUR, True),  # last used long ago: delete
])
def test_unused_launch_templates(kube: FakeCluster, *, cloud: FakeCloud, clock: ManualClock, age: float,
                                 used_ago: float | None, deleted: bool) -> None:
    now = clock.now() + age
    tid = cloud.add_template(TEMPLATE, created_at=clock.now(), used_at=None if used_ago is None else now - used_ago)
    result = sweep(kube, cloud, now=now)
    assert (result.deleted_templates == [TEMPLATE]) is deleted
    assert (tid in cloud.templates) is not deleted


def test_dry_run_reports_and_changes_nothing(kube: FakeCluster, cloud: FakeCloud, clock: ManualClock) -> None:
    launch(cloud)
    cloud.add_template(TEMPLATE, created_at=clock.now())
    result = sweep(kube, cloud, now=clock.now() + 2 * HOUR, dry_run=True)
    assert result.timed_out and result.deleted_templates
    assert cloud.owned_instances() and cloud.launch_templates() and cloud.unavailable() == frozenset()


def test_a_refused_termination_does_not_stop_the_sweep(kube: FakeCluster, cloud: FakeCloud,
                                                        clock: ManualClock) -> None:
    # GIVEN two instances that never registered, one with termination protection (EC2 then answers
    # OperationNotPermitted); wave 1 let that error abort every provisioner pass
    protected, plain = launch(cloud), launch(cloud)
    cloud.protect(protected)
    # WHEN the sweep times them out
    result = sweep(kube, cloud, now=clock.now() + HOUR)
    # THEN the other is terminated, the refusal is reported, and the next sweep tries again
    assert result.timed_out == [plain]
    assert [e for e in result.errors if protected in e and "OperationNotPermitted" in e]
    assert sweep(kube, cloud, now=clock.now() + HOUR).errors


def test_an_initialised_node_is_labelled_once_ready_without_registration_or_startup_taints(
        kube: FakeCluster, cloud: FakeCloud, clock: ManualClock) -> None:
    raw = node_for(launch(cloud))
    raw["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    kube.store.create("nodes", raw)
    now = clock.now() + 60
    first = sweep(kube, cloud, now=now)
    # The same sweep that registers the Ready node initialises it (a woken pass must not leave that to the
    # next safety pass), once
    assert first.untainted == ["n1"] and first.relabeled["n1"]["karpenter.sh/initialized"] == "true"
    got = kube.get_node("n1")
    assert got is not None and got.labels["karpenter.sh/initialized"] == "true"
    assert not sweep(kube, cloud, now=now).changed
