"""Drift in the disruption function: nodes whose NodePool template or EC2NodeClass spec changed (hash
tags written at launch), whose AMI, subnet or security groups are no longer the selected ones, or whose
labels no longer satisfy the pool's requirements are replaced — replacement first, then drain — within
the budgets for ``Drifted``. moto (in-process) for EC2 and SSM, the emulator for Kubernetes."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from autoscaler.domain.keys import DRAIN_STARTED_ANNOTATION as DRAIN_STARTED
from autoscaler.domain.keys import REPLACEMENT_REQUESTED_ANNOTATION as REPLACEMENT_REQUESTED
from simulator.local import put_public_parameter
from tests.adapters.aws.helpers import builtin_images
from tests.handlers.disruption.conftest import NODE_CLASS, node_pool

AL2023_AMD64 = "/aws/service/eks/optimized-ami/1.30/amazon-linux-2023/x86_64/standard/recommended/image_id"
AMI_CACHE_SECONDS = 3601


def busy_fleet(w: Any, count: int) -> list[tuple[str, str]]:
    """``count`` nodes, each with one pod, registered; (node, instance id) each."""
    out = []
    for i in range(count):
        iid = w.launch()
        name = w.register(iid)
        w.pod(f"web-{i}", name)
        out.append((name, iid))
    return out


def pool(**kw: Any) -> dict[str, Any]:
    # WhenEmpty: busy nodes are never consolidated, so only drift can move them.
    return node_pool(policy="WhenEmpty", **kw)


def new_ami(w: Any) -> str:
    """A newer AMI published under the al2023@latest alias."""
    base = builtin_images(w.ec2)["amd64"]
    image = w.ec2.copy_image(SourceImageId=base, SourceRegion="us-east-1", Name="al2023-v2")["ImageId"]
    put_public_parameter(AL2023_AMD64, image)
    return str(image)


def change_pool_template(w: Any) -> None:
    w.reconfigure(pools=[pool(labels={"team": "payments"})])


def change_node_class_spec(w: Any) -> None:
    spec = copy.deepcopy(NODE_CLASS)
    spec["spec"]["tags"] = {"cost-center": "42"}
    w.reconfigure(node_class=spec)


def move_the_ami(w: Any) -> None:
    new_ami(w)
    w.clock.advance(AMI_CACHE_SECONDS)


def select_another_subnet(w: Any) -> None:
    spec = copy.deepcopy(NODE_CLASS)
    spec["spec"]["subnetSelectorTerms"] = [{"id": w.network.subnets["us-east-1b"]}]
    w.reconfigure(node_class=spec)


def add_a_security_group(w: Any) -> None:
    spec = copy.deepcopy(NODE_CLASS)
    spec["spec"]["securityGroupSelectorTerms"] = [{"tags": {"karpenter.sh/discovery": "prod"}},
                                                  {"id": w.network.other_group}]
    w.reconfigure(node_class=spec)


def require_spot(w: Any) -> None:
    w.reconfigure(pools=[pool(requirements=[{"key": "karpenter.sh/capacity-type", "operator": "In",
                                             "values": ["spot"]}])])


CHANGES = {
    "nodepool-hash": (change_pool_template, "template changed"),
    "ec2nodeclass-hash": (change_node_class_spec, "spec changed"),
    "ami": (move_the_ami, "no longer selected"),
    "subnet": (select_another_subnet, "subnet"),
    "security-groups": (add_a_security_group, "security groups"),
    "requirements": (require_spot, "karpenter.sh/capacity-type"),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_drifted_node_is_replaced_first_then_drained(make_world: Any, change: str) -> None:
    # GIVEN one busy node launched from the current NodePool and EC2NodeClass
    w = make_world(pools=[pool()])
    [(old, old_iid)] = busy_fleet(w, 1)
    assert w.run()["decisions"] == []  # nothing has drifted yet
    before = {i["InstanceId"] for i in w.live_instances()}
    # WHEN the configuration or what it selects changes and a pass runs
    apply, why = CHANGES[change]
    apply(w)
    report = w.run()
    # THEN the node is Drifted: a replacement launches while the node keeps its pod
    [decision] = report["decisions"]
    assert decision["reason"] == "Drifted" and decision["action"] == "replace"
    assert report["replacing"] == [old] and w.pods_on(old) == ["web-0"]
    [new_iid] = {i["InstanceId"] for i in w.live_instances()} - before
    assert any(why in m for m in w.event_messages(old))
    # WHEN the replacement registers THEN the old node is drained and terminated
    w.register(new_iid)
    report = w.run()
    assert report["removed"] == [old] and w.state(old_iid) in ("shutting-down", "terminated")
    # and the replacement, launched from the new configuration, has not drifted
    assert w.run()["decisions"] == []


def test_the_replacement_runs_the_new_ami(make_world: Any) -> None:
    # GIVEN a node on the old AMI WHEN the alias moves and the node is replaced
    w = make_world(pools=[pool()])
    busy_fleet(w, 1)
    image = new_ami(w)
    w.clock.advance(AMI_CACHE_SECONDS)
    before = {i["InstanceId"] for i in w.live_instances()}
    w.run()
    # THEN the replacement instance runs the new AMI
    [new] = [i for i in w.live_instances() if i["InstanceId"] not in before]
    assert new["ImageId"] == image


def test_an_ami_update_rolls_the_fleet_within_budgets(make_world: Any) -> None:
    # GIVEN four busy nodes and a budget of one Drifted node at a time
    w = make_world(pools=[pool(budgets=[{"nodes": "100%"}, {"nodes": "1", "reasons": ["Drifted"]}])])
    fleet = busy_fleet(w, 4)
    old = {name for name, _ in fleet}
    move_the_ami(w)
    # WHEN passes run, each registering the replacements launched so far
    most_at_once, replacements = 0, set()
    for _ in range(12):
        w.run()
        leaving = [n for n, obj in w.nodes().items() if n in old and {REPLACEMENT_REQUESTED, DRAIN_STARTED}
                   & set(obj["metadata"].get("annotations") or {})]
        most_at_once = max(most_at_once, len(leaving))
        registered = {n["spec"]["providerID"].rsplit("/", 1)[-1] for n in w.nodes().values()}
        for inst in w.live_instances():
            if inst["InstanceId"] not in registered:
                replacements.add(w.register(inst["InstanceId"]))
        w.clock.advance(60)
    # THEN every old node left, never more than one at a time (a drifted node whose pods fit on the
    # replacements already registered is drained without a launch of its own)
    assert not old & set(w.nodes())
    assert most_at_once == 1 and replacements


def test_drift_respects_do_not_disrupt(make_world: Any) -> None:
    # GIVEN a drifted node with a do-not-disrupt pod
    w = make_world(pools=[pool()])
    name = w.register(w.launch())
    w.pod("precious", name, annotations={"karpenter.sh/do-not-disrupt": "true"})
    change_pool_template(w)
    # WHEN a pass runs THEN it is blocked, not replaced
    report = w.run()
    assert report["decisions"] == [] and [(b["reason"], b["guard"]) for b in report["blocked"]] == [
        ("Drifted", "DoNotDisrupt")]


def test_drift_can_be_switched_off(make_world: Any) -> None:
    # GIVEN drift: false and a node whose NodePool template changed
    w = make_world(pools=[pool()], drift=False)
    busy_fleet(w, 1)
    change_pool_template(w)
    # WHEN a pass runs THEN nothing is decided
    assert w.run()["decisions"] == []
