"""The warm cluster cache through the real handlers (moto server + the Kubernetes API emulator): a watcher's
wake-up catches the provisioner container's pods and nodes up to its resourceVersion, and a scheduled pass
(the provisioner's, every disruption pass) catches them up until the watch is quiet, instead of listing;
they list when the resync period has passed or the watch cannot resume."""

from __future__ import annotations

from typing import Any

import pytest

from autoscaler.adapters.aws.claims import CLAIM_SHARDS
from autoscaler.adapters.kube.informer import CacheSettings
from simulator.local import LocalCluster
from tests.e2e.test_launch_faults import ShiftedClock
from tests.e2e.test_provisioner import count_create_fleet

pytestmark = pytest.mark.e2e


def lists(env: LocalCluster, resource: str) -> int:
    """Lists of ``resource`` the emulator served (GETs of the collection that were not watches)."""
    watches = sum(1 for path in env.kube.store.watches if path.endswith(f"/{resource}"))
    return env.kube.requests().get(f"GET {resource}", 0) - watches


def newest_pod_version(env: LocalCluster) -> str:
    return str(max(int(p["metadata"]["resourceVersion"]) for p in env.kube.store.objects("pods")))


def wake(env: LocalCluster, *, pods: int, version: str | None) -> dict[str, object]:
    event: dict[str, object] = {"source": "watcher", "reason": f"{pods} pod(s) became unschedulable", "pods": pods}
    if version is not None:
        event["resourceVersion"] = version
    passes = env.invoke_provisioner(event)["passes"]
    assert len(passes) == 1
    return dict(passes[0])


def ec2_reads(env: LocalCluster) -> list[str]:
    """EC2 calls in order: "fleet", "list" (DescribeInstances of every owned instance, by filter) or
    "describe" (by instance id)."""
    seen: list[str] = []
    env.session.events.register("before-parameter-build.ec2.CreateFleet", lambda **_: seen.append("fleet"))
    env.session.events.register("before-parameter-build.ec2.DescribeInstances", lambda params, **_: seen.append(
        "describe" if params.get("InstanceIds") else "list"))
    return seen


def claim_reads(env: LocalCluster) -> list[str]:
    """DynamoDB Queries (reads of the node claims) as "claims" and CreateFleet calls as "fleet", in order."""
    seen: list[str] = []
    env.session.events.register("before-parameter-build.dynamodb.Query", lambda **_: seen.append("claims"))
    env.session.events.register("before-parameter-build.ec2.CreateFleet", lambda **_: seen.append("fleet"))
    return seen


def test_woken_passes_catch_up_and_plan_the_pods_that_went_pending_between_them(local: LocalCluster) -> None:
    # Given a warm container: the safety pass has run and listed the (empty) cluster
    calls = count_create_fleet(local)
    reads = ec2_reads(local)
    with_claims = claim_reads(local)
    assert local.invoke_provisioner()["passes"][0]["launched"] == []
    pod_lists, node_lists = lists(local, "pods"), lists(local, "nodes")
    assert pod_lists >= 1 and node_lists >= 1
    # When two pods go pending and the watcher wakes the provisioner with their newest version
    local.scale("inflate", 2)
    first = wake(local, pods=2, version=newest_pod_version(local))
    # Then the pass plans and launches for them without listing pods or nodes
    assert first["pendingPods"] == 2 and first["launched"] and len(calls) == 1
    assert (lists(local, "pods"), lists(local, "nodes")) == (pod_lists, node_lists)
    # When the first pass's node registers (kubelet, with the registration taint), two more pods go pending
    # between the passes, and the watcher wakes it again
    (registered,) = local.register_nodes(bind=False)
    local.scale("inflate", 4)
    reads.clear()
    with_claims.clear()
    pod_lists = lists(local, "pods")
    second = wake(local, pods=2, version=newest_pod_version(local))
    # Then it read the node claims once before its CreateFleet (the read that named the claimed instances is
    # the one it reconciled)
    # (one read of the claims: a Query per shard and one of the key they were kept under before the shards)
    assert with_claims[:with_claims.index("fleet")].count("claims") == CLAIM_SHARDS + 1
    # Then it asked EC2 about no instance before its CreateFleet (its launched claims say what they got), never
    # listed every owned instance, and its lifecycle step registered the claimed node from its claim (the
    # registration taint is gone)
    assert reads[:reads.index("fleet")] == [] and "list" not in reads
    taints = local.kube.store.get("nodes", None, registered)["spec"].get("taints") or []
    assert all(t["key"] != "karpenter.sh/unregistered" for t in taints)
    # Then the second pass sees all four pending (its cache caught up) and places the two new ones (the first
    # node's room and one more node; the first two stay on their in-flight claim), and still lists nothing
    assert second["pendingPods"] == 4 and second["unschedulable"] == []
    assert second["launched"] and len(calls) == 2
    # (the emulator counts the sweep's GET of the one node it untainted under "GET nodes" too)
    cache = local.cache_of("provisioner")
    assert cache is not None and dict(cache.stats.lists) == {"/api/v1/pods": 1, "/api/v1/nodes": 1}
    assert lists(local, "pods") == pod_lists


def test_a_wake_up_without_a_version_catches_up_as_a_scheduled_pass(local: LocalCluster) -> None:
    # Given a warm container
    local.invoke_provisioner()
    pod_lists = lists(local, "pods")
    # When a pod goes pending and a wake-up without a version arrives (an older watcher)
    local.scale("inflate", 1)
    result = wake(local, pods=1, version=None)
    # Then the pass catches up until quiet (no list) and plans for it
    assert result["pendingPods"] == 1 and result["launched"]
    assert lists(local, "pods") == pod_lists


def test_the_provisioners_cache_stays_in_its_own_container(local: LocalCluster) -> None:
    # Given a warm provisioner container (its pass built the cache) and the disruption function beside it,
    # sharing the local runtime as the simulation's functions do
    local.scale("inflate", 1)
    local.invoke_provisioner()
    pod_lists = lists(local, "pods")
    # When the disruption function runs
    from autoscaler.handlers.disruption import handler as disruption
    local.invoke(disruption, {"source": "schedule", "kind": "disruption"}, function_name="disruption")
    # Then it read the cluster itself (in Lambda it has its own container and no cache), and the
    # provisioner's next wake-up still finds its own warm cache: no list
    assert lists(local, "pods") > pod_lists
    after = lists(local, "pods")
    wake(local, pods=0, version=newest_pod_version(local))
    assert lists(local, "pods") == after


def test_a_disruption_pass_lists_once_and_catches_up_for_its_snapshot(local: LocalCluster) -> None:
    # Given a node running pods
    local.scale("inflate", 2)
    local.invoke_provisioner()
    local.register_nodes()
    pod_lists, node_lists = lists(local, "pods"), lists(local, "nodes")
    # When the disruption function runs twice
    for _ in range(2):
        run(local, "disruption")
    # Then only the first pass (a cold container) listed pods and nodes; the second caught up until quiet,
    # and each read them again for its snapshot by catching up, not by listing the cluster a second time
    assert (lists(local, "pods") - pod_lists, lists(local, "nodes") - node_lists) == (1, 1)
    cache = local.cache_of("disruption")
    assert cache is not None and cache.stats.watches >= 4


def run(env: LocalCluster, function: str) -> dict[str, Any]:
    """One scheduled invocation of ``function`` (the provisioner's first pass, or the disruption report)."""
    if function == "provisioner":
        return dict(env.invoke_provisioner()["passes"][0])
    from autoscaler.handlers.disruption import handler as disruption
    return dict(env.invoke(disruption, {"source": "schedule", "kind": "disruption"}, function_name="disruption"))


def cache_lists(env: LocalCluster, function: str) -> tuple[int, int]:
    """The full lists of pods and nodes the function's warm cache made."""
    cache = env.cache_of(function)
    assert cache is not None
    return cache.stats.lists["/api/v1/pods"], cache.stats.lists["/api/v1/nodes"]


def test_a_scheduled_pass_in_a_warm_container_catches_up_and_sees_what_changed(local: LocalCluster) -> None:
    # Given a warm provisioner container: a scheduled pass has listed the (empty) cluster
    calls = count_create_fleet(local)
    assert run(local, "provisioner")["launched"] == []
    pod_lists, node_lists = lists(local, "pods"), lists(local, "nodes")
    # When two pods go pending before the next scheduled pass
    local.scale("inflate", 2)
    second = run(local, "provisioner")
    # Then that pass plans and launches for them without listing pods or nodes
    assert second["pendingPods"] == 2 and second["launched"] and len(calls) == 1
    assert (lists(local, "pods"), lists(local, "nodes")) == (pod_lists, node_lists)
    # When the node registers (kubelet: the registration taint) before the next scheduled pass
    (registered,) = local.register_nodes(bind=False)
    third = run(local, "provisioner")
    # Then that pass saw the new node through its catch-up: its sweep registered it (the taint is gone), it
    # launched nothing more, and the container still listed each collection once only
    taints = local.kube.store.get("nodes", None, registered)["spec"].get("taints") or []
    assert all(t["key"] != "karpenter.sh/unregistered" for t in taints)
    assert third["launched"] == [] and len(calls) == 1
    assert cache_lists(local, "provisioner") == (1, 1)
    assert lists(local, "pods") == pod_lists


def test_a_disruption_pass_in_a_warm_container_sees_a_node_emptied_between_passes(local: LocalCluster) -> None:
    # Given a node running two pods, and a warm disruption container that has seen it in use
    local.scale("inflate", 2)
    run(local, "provisioner")
    (name,) = local.register_nodes(bind=False)
    run(local, "provisioner")  # its sweep lifts the registration taint
    assert len(local.schedule_pods()) == 2
    run(local, "disruption")
    annotations = local.kube.store.get("nodes", None, name)["metadata"].get("annotations") or {}
    assert "autoscaler.eks.aws/empty-since" not in annotations
    # When its pods go away before the next disruption pass
    local.scale("inflate", 0)
    run(local, "disruption")
    # Then that pass saw the node empty through its catch-up (it marked it empty since now), without a list
    annotations = local.kube.store.get("nodes", None, name)["metadata"].get("annotations") or {}
    assert "autoscaler.eks.aws/empty-since" in annotations
    assert cache_lists(local, "disruption") == (1, 1)


@pytest.mark.parametrize("function", ["provisioner", "disruption"])
def test_a_scheduled_pass_after_the_resync_period_lists(local: LocalCluster, function: str) -> None:
    # Given a warm container of the function (its first pass listed)
    clock = ShiftedClock()
    local.runtime(clock=clock)
    run(local, function)
    assert cache_lists(local, function) == (1, 1)
    # When the next scheduled pass runs just within the resync period / Then it catches up
    period = CacheSettings().resync_seconds
    clock.shift = period - 30
    run(local, function)
    assert cache_lists(local, function) == (1, 1), function
    # When the next one runs once the period has passed since the first list / Then it lists (the resync)
    clock.shift = period + 1
    run(local, function)
    assert cache_lists(local, function) == (2, 2), function


@pytest.mark.parametrize("function", ["provisioner", "disruption"])
def test_a_scheduled_pass_whose_catch_up_hits_410_gone_lists(local: LocalCluster, function: str) -> None:
    # Given a warm container of the function, a pod created since, and the API server's history compacted
    run(local, function)
    local.scale("inflate", 1)
    local.kube.store.compact()
    # When the next scheduled pass catches up
    result = run(local, function)
    # Then the watch's 410 Gone makes it list both collections again (and the provisioner sees the pod)
    assert cache_lists(local, function) == (2, 2), function
    cache = local.cache_of(function)
    assert cache is not None and sum(cache.stats.relists.values()) == 2
    if function == "provisioner":
        assert result["pendingPods"] == 1
