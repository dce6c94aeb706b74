"""Node repair in the disruption function: a node unhealthy past its toleration (Ready False/Unknown for
30 min, the EKS node monitoring agent's conditions past theirs) is replaced forcefully — pods deleted
whatever their PDBs say, instance terminated — unless more than 20 % of its NodePool is unhealthy."""

from __future__ import annotations

from typing import Any

import pytest

from autoscaler.domain.keys import DRAIN_REASON_ANNOTATION, OWNER_ANNOTATION
from tests.handlers.disruption.conftest import node_pool, stamp

MINUTE = 60.0


class _Refused:
    """The HTTP side of an error answered at botocore's ``before-call`` hook (moto cannot be told to refuse)."""

    status_code, headers, content = 403, {}, b""


def _refused() -> Any:
    return _Refused(), {"Error": {"Code": "UnauthorizedOperation", "Message": "refused by an SCP"},
                        "ResponseMetadata": {"HTTPStatusCode": 403}}


def condition(w: Any, kind: str, status: str, *, minutes: float) -> list[dict[str, Any]]:
    """A node's conditions with ``kind`` in ``status`` since ``minutes`` ago (Ready stays True otherwise)."""
    since = stamp(w.clock.now() - minutes * MINUTE)
    others = [] if kind == "Ready" else [{"type": "Ready", "status": "True"}]
    return [*others, {"type": kind, "status": status, "lastTransitionTime": since}]


@pytest.mark.parametrize(("kind", "status", "minutes", "repaired"), [
    ("Ready", "False", 29, False),
    ("Ready", "False", 31, True),
    ("Ready", "Unknown", 31, True),
    ("Ready", "True", 600, False),
    ("AcceleratedHardwareReady", "False", 11, True),  # 10 min toleration
    ("AcceleratedHardwareReady", "False", 9, False),
    ("KernelReady", "False", 11, False),  # 30 min toleration
    ("KernelReady", "False", 31, True),
    ("ContainerRuntimeReady", "False", 31, True),
    ("NetworkingReady", "False", 31, True),
    ("StorageReady", "False", 31, True),
    ("StorageReady", "True", 31, False),
])
def test_a_node_is_repaired_only_past_its_toleration(make_world: Any, kind: str, status: str, minutes: float,
                                                     repaired: bool) -> None:
    # GIVEN a pool of five nodes, one of them with a condition in a given state for a while
    w = make_world()
    sick_iid = w.launch()
    sick = w.register(sick_iid, conditions=condition(w, kind, status, minutes=minutes))
    for i in range(4):
        w.pod(f"busy-{i}", w.node())
    # WHEN a pass runs
    report = w.run()
    # THEN the node is removed with reason Unhealthy exactly when its toleration has passed
    assert (sick not in w.nodes()) is repaired
    assert (w.state(sick_iid) in ("shutting-down", "terminated")) is repaired
    assert [d["reason"] for d in report["decisions"] if sick in d["nodes"]] == (["Unhealthy"] if repaired else [])


def test_repair_deletes_pods_that_a_pdb_and_do_not_disrupt_protect(make_world: Any) -> None:
    # GIVEN a NotReady node whose pods a PDB allowing nothing and do-not-disrupt protect
    w = make_world()
    for _ in range(4):
        w.node()
    iid = w.launch()
    sick = w.register(iid, conditions=condition(w, "Ready", "Unknown", minutes=45),
                      annotations={"karpenter.sh/do-not-disrupt": "true"})
    w.pod("db-0", sick, labels={"app": "db"}, annotations={"karpenter.sh/do-not-disrupt": "true"})
    w.store.create("poddisruptionbudgets", {"metadata": {"name": "db", "namespace": "default"},
                                            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}}})
    # WHEN a pass runs
    report = w.run()
    # THEN Karpenter's forceful repair: the pod is deleted, the instance terminated, the node gone
    assert report["removed"] == [sick] and w.pods_on(sick) == []
    assert w.state(iid) in ("shutting-down", "terminated")
    assert w.sink.total("NodesDisrupted", Reason="Unhealthy") == 1
    assert report["blocked"] == []


@pytest.mark.parametrize(("nodes", "unhealthy", "repaired"), [
    (5, 1, 1),  # 20 % of 5 is 1: one unhealthy node may be repaired
    (5, 2, 0),  # 2 > 1: the pool is unhealthy, repair pauses
    (3, 1, 1),  # 20 % of 3 rounds up to 1
    (10, 2, 2),
    (10, 3, 0),
])
def test_repair_pauses_when_more_than_20_percent_of_the_pool_is_unhealthy(
        make_world: Any, nodes: int, unhealthy: int, repaired: int) -> None:
    # GIVEN a pool with some nodes NotReady for an hour
    w = make_world()
    sick = [w.register(w.launch(), conditions=condition(w, "Ready", "False", minutes=60)) for _ in range(unhealthy)]
    for i in range(nodes - unhealthy):
        w.pod(f"busy-{i}", w.node())
    # WHEN a pass runs
    report = w.run()
    # THEN they are repaired only while no more than 20 % (rounded up) of the pool is unhealthy
    assert len([n for n in sick if n not in w.nodes()]) == repaired
    if not repaired:
        assert {b["guard"] for b in report["blocked"]} == {"UnhealthyNodePool"}


def test_node_repair_can_be_switched_off(make_world: Any) -> None:
    # GIVEN nodeRepair: false and a node NotReady for an hour
    w = make_world(pools=[node_pool()], nodeRepair=False)
    for i in range(4):
        w.pod(f"busy-{i}", w.node())
    sick = w.register(w.launch(), conditions=condition(w, "Ready", "False", minutes=60))
    w.pod("web", sick)
    # WHEN a pass runs THEN the node stays
    w.run()
    assert sick in w.nodes()


def test_a_repair_is_recorded_and_finished_by_the_next_pass_when_terminate_is_refused(make_world: Any) -> None:
    # GIVEN a node NotReady for an hour, and TerminateInstances refused once
    w = make_world()
    for _ in range(4):
        w.node()
    iid = w.launch()
    sick = w.register(iid, conditions=condition(w, "Ready", "False", minutes=60))
    refused: list[int] = []

    def refuse_once(**_: Any) -> Any:
        if refused:
            return None
        refused.append(1)
        return _refused()
    w.ec2.meta.events.register("before-call.ec2.TerminateInstances", refuse_once)
    # WHEN a pass runs
    w.run()
    # THEN the node carries the disruption function's record with reason unhealthy, cordoned
    notes = w.nodes()[sick]["metadata"]["annotations"]
    assert notes[OWNER_ANNOTATION] == "disruption" and notes[DRAIN_REASON_ANNOTATION] == "unhealthy"
    assert w.nodes()[sick]["spec"].get("unschedulable")
    # WHEN the next pass runs THEN it finishes the repair
    assert w.run()["removed"] == [sick] and w.state(iid) in ("shutting-down", "terminated")
