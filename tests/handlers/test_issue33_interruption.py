"""Issue 33 items 14 and 15, through the real interruption handler against moto and the Kubernetes API
emulator (which enforces resourceVersion preconditions as kube-apiserver does)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from autoscaler.app.node_state import NodeStates
from autoscaler.domain.node_state import NodeState
from tests.handlers.interruption_world import World, event_for


def _both_read_before_either_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The race SQS allows (two invocations with the same interruption at once), made certain: each
    invocation's first read of the node-state record waits until the other has read it too."""
    barrier = threading.Barrier(2, timeout=10)
    reads = iter(range(2))  # the first two reads are the two invocations' cordon passes
    lock = threading.Lock()
    read = NodeStates.read

    def synchronised(node: Any) -> NodeState:
        state = read(node)
        with lock:
            waits = next(reads, None) is not None
        if waits:
            barrier.wait()
        return state

    monkeypatch.setattr(NodeStates, "read", staticmethod(synchronised))


def test_issue33_item_14_one_interruption_in_two_invocations_is_taken_once(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    iid = world.add_node("n1", owned=False)
    world.add_pod("app", "n1")
    _both_read_before_either_writes(monkeypatch)
    event = event_for("spot-interruption-warning", iid)
    responses: list[dict[str, Any]] = []
    threads = [threading.Thread(target=lambda: responses.append(world.run(event))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert responses == [{"batchItemFailures": []}] * 2
    # Exactly one invocation took the node: one replacement request, one eviction of the pod.
    assert len(world.invokes.payloads) == 1, world.invokes.payloads
    evictions = [p for m, p in world.kube.store.requests if m == "POST" and p.endswith("/pods/app/eviction")]
    assert len(evictions) == 1, evictions
    node = world.node("n1")
    assert node is not None and node["spec"].get("unschedulable") is True


def test_issue33_item_15_a_pdb_does_not_keep_the_node_of_an_instance_ec2_terminated(world: World) -> None:
    from tests import kube_objects as ko

    iid = world.add_node("n1", owned=False)
    for i in range(2):
        world.add_pod(f"web-{i}", "n1", labels={"app": "web"})
    world.kube.store.create("poddisruptionbudgets", ko.pdb("web", match={"app": "web"}, min_available=2),
                            namespace="default")
    world.ec2.terminate_instances(InstanceIds=[iid])  # EC2 took the instance before the drain could finish
    spot = event_for("spot-interruption-warning", iid, event_id="spot-gone")
    gone = event_for("state-change-terminated", iid, event_id="state-gone")

    response = world.run(spot, gone, message_ids=["spot", "state"], remaining_ms=12_000)

    assert response == {"batchItemFailures": []}  # both acknowledged: nothing left for the DLQ
    assert world.node("n1") is None and world.pods_on("n1") == []
    assert sum(p[1] for p in world.sink.points if p[0] == "NodesDeletedInstanceGone") == 1
