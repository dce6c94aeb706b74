"""The Auto Scaling terminate lifecycle-hook path (NTH's ASG mode, for managed node groups): drain the
node, then CompleteLifecycleAction(CONTINUE); a heartbeat while a drain is retried; never a termination
of our own (the group terminates). moto serves Auto Scaling but not these two calls, so they are answered
at botocore's ``before-call`` hook by a stand-in that, like Auto Scaling, refuses a hook that does not
exist and an action that is no longer active (``LifecycleStandIn`` in interruption_world.py)."""

from __future__ import annotations

import pytest

from tests import kube_objects as ko
from tests.handlers.interruption_world import LifecycleStandIn, World, event_for

GROUP, HOOK = "eks-workers", "drain-before-terminate"


@pytest.fixture
def asg(world: World) -> LifecycleStandIn:
    client = world.rt.client("autoscaling")
    ec2 = world.rt.client("ec2")
    ec2.create_launch_template(LaunchTemplateName="workers", LaunchTemplateData={"ImageId": world.image,
                                                                               "InstanceType": "m5.large"})
    client.create_auto_scaling_group(AutoScalingGroupName=GROUP, MinSize=0, MaxSize=3, DesiredCapacity=0,
                                     LaunchTemplate={"LaunchTemplateName": "workers"},
                                     AvailabilityZones=["us-west-2a"])
    client.put_lifecycle_hook(AutoScalingGroupName=GROUP, LifecycleHookName=HOOK,
                              LifecycleTransition="autoscaling:EC2_INSTANCE_TERMINATING", HeartbeatTimeout=300)
    return world.lifecycle


def test_a_terminate_hook_drains_then_continues_and_never_terminates_itself(world: World,
                                                                            asg: LifecycleStandIn) -> None:
    iid = world.add_node("mng-1", owned=False)
    world.add_pod("web-1", "mng-1")
    assert world.run(event_for("asg-terminate-lifecycle-action", iid)) == {"batchItemFailures": []}
    assert world.evictions() == ["default/web-1"]
    assert [(c["InstanceId"], c["LifecycleActionResult"], c["LifecycleHookName"]) for c in asg.completed] == [
        (iid, "CONTINUE", HOOK)]
    assert world.state(iid) == "running"  # the group terminates it once the hook continues


def test_a_retried_drain_sends_a_heartbeat_and_completes_later(world: World, asg: LifecycleStandIn) -> None:
    world.kube.store.graceful_deletion = True
    iid = world.add_node("mng-1", owned=False)
    world.add_pod("web-1", "mng-1")
    body = event_for("asg-terminate-lifecycle-action", iid)
    assert world.run(body, message_ids=["m"], remaining_ms=11_000) == {"batchItemFailures": [{"itemIdentifier": "m"}]}
    assert [h["InstanceId"] for h in asg.heartbeats] == [iid] and asg.completed == []
    world.kube.store.finish_terminating()
    assert world.run(body, message_ids=["m"]) == {"batchItemFailures": []}
    assert [c["InstanceId"] for c in asg.completed] == [iid]
    assert world.run(body, message_ids=["m"]) == {"batchItemFailures": []}  # duplicate: no longer active, fine


def test_an_instance_that_is_no_node_is_continued_at_once(world: World, asg: LifecycleStandIn) -> None:
    assert world.run(event_for("asg-terminate-lifecycle-action", "i-0aaaaaaaaaaaaaaaa")) == {"batchItemFailures": []}
    assert [c["InstanceId"] for c in asg.completed] == ["i-0aaaaaaaaaaaaaaaa"]


def test_a_launch_hook_continues_once_the_instance_is_a_ready_node(world: World, asg: LifecycleStandIn) -> None:
    # NTH's ASG launch path: the group keeps a new instance out of service until it can take pods.
    world.rt.client("autoscaling").put_lifecycle_hook(
        AutoScalingGroupName=GROUP, LifecycleHookName="wait-until-node-ready",
        LifecycleTransition="autoscaling:EC2_INSTANCE_LAUNCHING", HeartbeatTimeout=300)
    iid = world.launch(owned=False)
    body = event_for("asg-launch-lifecycle-action", iid)
    # GIVEN no node yet: a heartbeat, and the message comes back (wave 1 acknowledged it and did nothing)
    assert world.run(body, message_ids=["m"]) == {"batchItemFailures": [{"itemIdentifier": "m"}]}
    assert [h["InstanceId"] for h in asg.heartbeats] == [iid] and asg.completed == []
    # a registered but NotReady node is not enough
    node = ko.node("mng-new")
    node["spec"]["providerID"] = f"aws:///us-west-2a/{iid}"
    node["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    world.kube.store.create("nodes", node)
    assert world.run(body, message_ids=["m"]) == {"batchItemFailures": [{"itemIdentifier": "m"}]}
    assert asg.completed == []
    # THEN once Ready the hook continues, and the message is done
    world.kube.store.patch("nodes", None, "mng-new", {"status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    assert world.run(body, message_ids=["m"]) == {"batchItemFailures": []}
    assert [(c["InstanceId"], c["LifecycleActionResult"], c["LifecycleHookName"]) for c in asg.completed] == [
        (iid, "CONTINUE", "wait-until-node-ready")]
    assert world.evictions() == [] and world.state(iid) == "running"
