"""NTH parity options of the interruption function (cluster file ``interruption`` section): cordon-only,
dry-run, excluded nodes, pod and node termination grace periods, deleteLocalData and deleting finished
pods, through the real handler against moto and the Kubernetes API emulator."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from autoscaler.handlers.runtime import set_runtime
from simulator.kube_api import KubeApiServer
from tests import kube_objects as ko
from tests.handlers.interruption_world import World, demo_config, event_for

DISRUPTED = "karpenter.sh/disrupted"


@pytest.fixture
def make(aws: None, kube_api: KubeApiServer) -> Iterator[Any]:
    def build(**settings: Any) -> World:
        return World.create(kube_api, demo_config(**settings))
    yield build
    set_runtime(None)


def _node(world: World, name: str) -> dict[str, Any]:
    obj = world.node(name)
    assert obj is not None
    return obj


def test_cordon_only_cordons_and_asks_for_capacity_but_never_drains_or_terminates(make: Any) -> None:
    world = make(cordon_only=True)
    iid = world.add_node("n1")
    world.add_pod("web-1", "n1")
    assert world.run(event_for("spot-interruption-warning", iid)) == {"batchItemFailures": []}
    assert _node(world, "n1")["spec"]["unschedulable"] is True
    assert world.evictions() == [] and world.state(iid) == "running"
    assert len(world.invokes.calls) == 1


def test_dry_run_changes_nothing(make: Any) -> None:
    world = make(dry_run=True)
    iid = world.add_node("n1")
    world.add_pod("web-1", "n1")
    assert world.run(event_for("spot-interruption-warning", iid)) == {"batchItemFailures": []}
    node = _node(world, "n1")
    assert not node["spec"].get("unschedulable") and not node["spec"].get("taints")
    assert world.evictions() == [] and world.invokes.calls == [] and world.state(iid) == "running"


def test_nodes_matching_the_exclude_labels_are_left_alone(make: Any) -> None:
    world = make(exclude_node_labels={"team": "payments"})
    excluded, other = world.add_node("pay"), world.add_node("web")
    world.kube.store.patch("nodes", None, "pay", {"metadata": {"labels": {"team": "payments"}}})
    assert world.run(event_for("spot-interruption-warning", excluded),
                     event_for("spot-interruption-warning", other)) == {"batchItemFailures": []}
    assert not _node(world, "pay")["spec"].get("unschedulable") and world.state(excluded) == "running"
    assert world.node("web") is None


def test_the_pod_termination_grace_period_overrides_each_pods_own(make: Any) -> None:
    world = make(pod_termination_grace_period=7)
    world.kube.store.graceful_deletion = True
    iid = world.add_node("n1")
    world.add_pod("web-1", "n1", grace=120)
    world.run(event_for("spot-interruption-warning", iid), remaining_ms=11_000)
    pod = world.kube.store.get("pods", "default", "web-1")
    assert pod["metadata"]["deletionGracePeriodSeconds"] == 7


def test_the_node_termination_grace_period_bounds_one_nodes_drain(make: Any) -> None:
    world = make(node_termination_grace_period=1)
    world.kube.store.graceful_deletion = True  # the pod never finishes: only the bound ends the drain
    iid = world.add_node("n1")
    world.add_pod("web-1", "n1")
    started = time.monotonic()
    response = world.run(event_for("spot-interruption-warning", iid), message_ids=["m"], remaining_ms=60_000)
    assert response == {"batchItemFailures": [{"itemIdentifier": "m"}]}
    assert time.monotonic() - started < 20  # not the 50 s the invocation allowed


def test_without_delete_local_data_emptydir_pods_stay_and_the_drain_is_retried(make: Any) -> None:
    world = make(delete_local_data=False)
    iid = world.add_node("n1")
    world.add_pod("web-1", "n1")
    scratch = ko.pod("scratch", node="n1", ready=True)
    scratch["spec"]["volumes"] = [{"name": "tmp", "emptyDir": {}}]
    world.kube.store.create("pods", scratch)
    response = world.run(event_for("spot-interruption-warning", iid), message_ids=["m"], remaining_ms=12_000)
    assert response == {"batchItemFailures": [{"itemIdentifier": "m"}]}
    assert world.evictions() == ["default/web-1"] and world.pods_on("n1") == ["default/scratch"]


def test_finished_pods_are_deleted_when_asked(make: Any) -> None:
    world = make(delete_finished_pods=True)
    iid = world.add_node("n1", owned=False)
    world.kube.store.create("pods", ko.pod("job-done", node="n1", phase="Succeeded"))
    world.add_pod("web-1", "n1")
    assert world.run(event_for("spot-interruption-warning", iid)) == {"batchItemFailures": []}
    assert world.pods_on("n1") == []
