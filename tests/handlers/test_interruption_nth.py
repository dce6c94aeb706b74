"""NTH parity options of the interruption function (cluster file ``interruption`` section) reach the service the
handler builds, and dry-run holds end to end through the real handler against moto and the Kubernetes API
emulator. What each switch does is tested on the service over the port fakes, in virtual time
(``tests/app/test_interruption_service.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from autoscaler.app.drain import DrainOptions
from autoscaler.handlers.interruption import build_service
from autoscaler.handlers.runtime import set_runtime
from simulator.kube_api import KubeApiServer
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


def test_the_nth_switches_of_the_cluster_file_reach_the_service(make: Any) -> None:
    world = make(cordon_only=True, dry_run=True, exclude_node_labels={"team": "payments"},
                 pod_termination_grace_period=7, node_termination_grace_period=60, delete_local_data=False,
                 delete_finished_pods=True)
    service = build_service(world.rt)
    assert (service.cordon_only, service.dry_run, dict(service.exclude_node_labels), service.node_grace_seconds) == (
        True, True, {"team": "payments"}, 60)
    assert service.drain_options == DrainOptions(grace_seconds=7, delete_local_data=False, delete_finished=True)


def test_dry_run_changes_nothing(make: Any) -> None:
    world = make(dry_run=True)
    iid = world.add_node("n1")
    world.add_pod("web-1", "n1")
    assert world.run(event_for("spot-interruption-warning", iid)) == {"batchItemFailures": []}
    node = _node(world, "n1")
    assert not node["spec"].get("unschedulable") and not node["spec"].get("taints")
    assert world.evictions() == [] and world.invokes.calls == [] and world.state(iid) == "running"
