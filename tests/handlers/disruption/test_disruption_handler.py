"""The disruption function end to end through its handler: the emulator for Kubernetes, in-process moto
for EC2, a manual clock. GIVEN a cluster state, WHEN passes run, THEN only what may go goes."""

from __future__ import annotations

from typing import Any

from autoscaler.domain.keys import DRAIN_STARTED_ANNOTATION as DRAIN_STARTED
from autoscaler.domain.keys import EMPTY_SINCE_ANNOTATION as EMPTY_SINCE
from autoscaler.domain.keys import REPLACEMENT_REQUESTED_ANNOTATION as REPLACEMENT_REQUESTED
from tests.handlers.disruption.conftest import node_pool

DISRUPTED = {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}


def _tainted(node: dict[str, Any]) -> bool:
    return any(t.get("key") == DISRUPTED["key"] for t in (node.get("spec") or {}).get("taints") or ())


def test_empty_node_is_removed_only_after_consolidate_after(make_world: Any) -> None:
    w = make_world()
    iid = w.launch()
    name = w.register(iid)
    w.pod("agent", name, owner="DaemonSet")  # DaemonSet pods do not make a node busy

    w.run()
    assert EMPTY_SINCE in w.nodes()[name]["metadata"]["annotations"]
    w.clock.advance(20)
    assert w.run()["removed"] == [] and name in w.nodes()
    w.clock.advance(15)
    report = w.run()

    assert report["removed"] == [name] and report["decisions"][0]["reason"] == "Empty"
    assert name not in w.nodes() and w.state(iid) in ("shutting-down", "terminated")
    assert w.sink.total("NodesDisrupted", Reason="Empty") == 1
    assert report["decisions"][0]["savingPerHour"] == w.prices["m5.large"]
    assert "DisruptionTerminating" in w.events(name)


def test_a_node_that_gets_a_pod_again_loses_its_empty_since(make_world: Any) -> None:
    w = make_world()
    name = w.node()
    w.run()
    w.pod("web", name)
    w.run()
    assert EMPTY_SINCE not in w.nodes()[name]["metadata"]["annotations"]


def test_do_not_disrupt_pod_keeps_its_node(make_world: Any) -> None:
    w = make_world()
    keep, room = w.node(), w.node("m5.xlarge", annotations={"karpenter.sh/do-not-disrupt": "true"})
    w.pod("precious", keep, annotations={"karpenter.sh/do-not-disrupt": "true"})
    w.pod("web", room)
    w.clock.advance(60)

    report = w.run()

    assert keep in w.nodes() and room in w.nodes() and report["decisions"] == []
    assert {(b["node"], b["guard"]) for b in report["blocked"]} == {(keep, "DoNotDisrupt"), (room, "DoNotDisrupt")}
    assert w.sink.total("DisruptionBlocked", Guard="DoNotDisrupt") == 2
    assert not w.nodes()[keep]["spec"].get("unschedulable")


def test_a_budget_of_one_node_limits_a_pass(make_world: Any) -> None:
    w = make_world(pools=[node_pool(budgets=[{"nodes": "1"}])])
    names = [w.node() for _ in range(3)]
    w.run()
    w.clock.advance(31)

    report = w.run()

    assert len(report["removed"]) == 1 and len(w.nodes()) == 2
    assert sorted(b["node"] for b in report["blocked"] if b["guard"] == "Budget") == sorted(
        set(names) - set(report["removed"]))
    assert w.sink.total("DisruptionBlocked", Guard="Budget") == 2
    w.run()
    w.run()
    assert w.nodes() == {}


def test_nodes_not_launched_by_us_are_never_touched(make_world: Any) -> None:
    w = make_world()
    foreign = w.foreign_instance()
    labelled = w.register(foreign, name="foreign-labelled")  # has our nodepool label, not our tags
    unlabelled = w.register(w.launch(), name="unlabelled", pool=None)  # ours by tag, no nodepool label
    w.run()
    w.clock.advance(3600)

    report = w.run()

    assert set(w.nodes()) == {labelled, unlabelled}
    assert [(b["node"], b["guard"]) for b in report["blocked"]] == [(labelled, "NotOurs")]
    assert w.state(foreign) == "running"
    assert w.nodes()[unlabelled]["metadata"].get("annotations", {}) == {}
    assert not any(_tainted(n) for n in w.nodes().values())


def test_dry_run_reports_and_changes_nothing(make_world: Any) -> None:
    w = make_world(dryRun=True)
    iid = w.launch()
    name = w.register(iid, age=3600)
    before = w.nodes()

    report = w.run()

    assert report["dryRun"] and [d["nodes"] for d in report["decisions"]] == [[name]]
    assert w.nodes() == before and w.state(iid) == "running"
    assert w.store.objects("events") == []
    assert w.sink.total("NodesDisrupted") == 0


def _web_behind_a_pdb(w: Any) -> tuple[str, str]:
    """Node a (m5.large) holds two web pods and node b (do-not-disrupt) one; a PDB keeps two of the
    three available, so draining a evicts one pod and is then blocked."""
    a = w.node("m5.large")
    b = w.node("m5.xlarge", annotations={"karpenter.sh/do-not-disrupt": "true"})
    for i, node in enumerate((a, a, b)):
        w.pod(f"web-{i}", node, labels={"app": "web"})
    w.store.create("poddisruptionbudgets", {"metadata": {"name": "web", "namespace": "default"},
                                            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}})
    return a, b


def test_pdb_blocks_a_drain_then_lets_it_finish(make_world: Any) -> None:
    w = make_world(drainSecondsPerPass=10)
    a, b = _web_behind_a_pdb(w)
    w.clock.advance(60)

    first = w.run()

    assert first["draining"] == [a] and first["decisions"][0]["action"] == "delete"
    node_a = w.nodes()[a]
    assert node_a["spec"]["unschedulable"] and _tainted(node_a) and DRAIN_STARTED in node_a["metadata"]["annotations"]
    assert len(w.pods_on(a)) == 1 and w.sink.total("EvictionsBlockedByPDB") >= 1

    w.pod("web-new", b, labels={"app": "web"})  # the controller's replacement pod became ready
    second = w.run()

    assert second["removed"] == [a] and a not in w.nodes()
    assert w.sink.total("NodesDisrupted", Reason="Underutilized") == 1
    assert w.sink.total("PodsEvicted") == 2


def test_a_drain_blocked_too_long_is_abandoned_and_the_node_uncordoned(make_world: Any) -> None:
    w = make_world(blockedDrainTimeout="1m", drainSecondsPerPass=10)
    a, _ = _web_behind_a_pdb(w)
    w.clock.advance(60)
    w.run()
    released: list[str] = []
    for _ in range(4):
        w.clock.advance(20)
        released += w.run()["released"]

    assert released == [a]
    node_a = w.nodes()[a]
    assert not node_a["spec"].get("unschedulable") and not _tainted(node_a)
    assert not {DRAIN_STARTED, REPLACEMENT_REQUESTED} & set(node_a["metadata"].get("annotations", {}))
    assert w.sink.total("DisruptionBlocked", Guard="PDB") >= 1


def test_expired_node_gets_its_replacement_before_its_drain(make_world: Any) -> None:
    w = make_world(pools=[node_pool(expire_after="1h")])
    old_iid = w.launch("m5.large")
    old = w.register(old_iid, age=3601)
    w.pod("web-0", old, cpu="500m")
    w.pod("web-1", old, cpu="500m")
    start = {i["InstanceId"] for i in w.live_instances()}

    first = w.run()

    [new_iid] = {i["InstanceId"] for i in w.live_instances()} - start
    assert first["decisions"][0]["reason"] == "Expired" and first["decisions"][0]["action"] == "replace"
    assert first["replacing"] == [old]
    assert w.pods_on(old) == ["web-0", "web-1"] and not w.nodes()[old]["spec"].get("unschedulable")
    assert REPLACEMENT_REQUESTED in w.nodes()[old]["metadata"]["annotations"]

    w.clock.advance(60)
    assert w.run()["replacing"] == [old] and w.pods_on(old) == ["web-0", "web-1"]

    w.register(new_iid)
    w.clock.advance(60)
    third = w.run()

    assert third["removed"] == [old] and w.state(old_iid) in ("shutting-down", "terminated")
    assert w.state(new_iid) == "running"
    assert w.sink.total("NodesDisrupted", Reason="Expired") == 1


def test_consolidation_deletes_a_node_whose_pods_fit_elsewhere(make_world: Any) -> None:
    w = make_world()
    a, b = w.node("m5.large"), w.node("m5.large")
    w.pod("small", a, cpu="200m", memory="1Gi")
    w.pod("big-0", b, cpu="150m", memory="1792Mi")
    w.pod("big-1", b, cpu="150m", memory="1792Mi")
    assert w.hourly_cost() == round(2 * w.prices["m5.large"], 6)
    w.clock.advance(60)

    report = w.run()

    [d] = report["decisions"]
    assert (d["reason"], d["action"], d["nodes"]) == ("Underutilized", "delete", [a])
    assert report["removed"] == [a] and set(w.nodes()) == {b}
    assert w.hourly_cost() == round(w.prices["m5.large"], 6)


def test_consolidation_replaces_two_half_empty_nodes_with_one_cheaper_node(make_world: Any) -> None:
    w = make_world()
    a, b = w.node("m5.xlarge"), w.node("m5.xlarge")
    for node in (a, b):
        w.pod(f"{node[:6]}-0", node, cpu="900m", memory="1Gi")
        w.pod(f"{node[:6]}-1", node, cpu="900m", memory="1Gi")
    before = w.hourly_cost()
    assert before == round(2 * w.prices["m5.xlarge"], 6)
    start = {i["InstanceId"] for i in w.live_instances()}
    w.clock.advance(60)

    first = w.run()

    [d] = first["decisions"]
    assert (d["action"], sorted(d["nodes"])) == ("replace", sorted([a, b]))
    [new_iid] = {i["InstanceId"] for i in w.live_instances()} - start
    w.register(new_iid)
    w.clock.advance(60)
    second = w.run()

    assert sorted(second["removed"]) == sorted([a, b])
    after = w.hourly_cost()
    assert after < before and after == round(d["priceAfter"], 6)
    assert [i["InstanceId"] for i in w.live_instances()] == [new_iid]


def test_with_a_provisioner_function_replacements_are_asked_of_it(make_world: Any) -> None:
    import json
    from dataclasses import replace

    import boto3
    from botocore.stub import Stubber

    from autoscaler.config import DeploymentEnv
    from autoscaler.handlers.runtime import set_runtime

    w = make_world(pools=[node_pool(expire_after="1h")])
    old = w.register(w.launch("m5.large"), age=3601)
    w.pod("web-0", old)
    client = boto3.client("lambda", region_name="us-east-1")
    rt = replace(w.runtime, env=DeploymentEnv(provisioner_function="prod-provisioner"))
    rt._clients["lambda"] = client
    set_runtime(rt)
    start = len(w.live_instances())
    payload = {"source": "disruption", "kind": "replacement", "nodes": [old], "unavailable": [],
               "eventId": f"disruption-expired-{old}-{int(w.clock.now())}"}
    with Stubber(client) as stub:
        stub.add_response("invoke", {"StatusCode": 202}, {
            "FunctionName": "prod-provisioner", "InvocationType": "Event",
            "Payload": json.dumps(payload).encode()})
        report = w.run()
        stub.assert_no_pending_responses()

    # The provisioner launches; this function launched nothing itself and waits for the capacity.
    assert report["replacing"] == [old] and len(w.live_instances()) == start
    assert REPLACEMENT_REQUESTED in w.nodes()[old]["metadata"]["annotations"]
