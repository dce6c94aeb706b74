"""Issue 34, the launch path of a burst: every node group's CreateFleet in one wave, and the launch's
prerequisites (security groups, AMIs, the cluster's launch templates) resolved while the pass reads, not in
front of the first CreateFleet. Real handlers on moto and the emulator; waits are conditions (a barrier all
groups must reach together), never durations."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from autoscaler.app import provisioner as provisioner_module
from autoscaler.handlers.provisioner import provisioner_for
from simulator.local import LocalCluster, inflate_pod

pytestmark = pytest.mark.e2e

ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
TYPES = ("m5.xlarge", "m5.2xlarge", "m5.4xlarge", "c5.xlarge", "c5.2xlarge", "c5.4xlarge", "r5.xlarge", "r5.2xlarge",
         "r5.4xlarge", "m6i.xlarge", "m6i.2xlarge", "c6i.xlarge", "c6i.2xlarge", "r6i.xlarge", "r6i.2xlarge",
         "m5a.xlarge", "m5a.2xlarge", "c5a.xlarge", "c5a.2xlarge", "r5a.xlarge", "r5a.2xlarge")
# (the demo NodePool takes sizes above large; not every zone offers every type)


def _pinned_pods(local: LocalCluster) -> None:
    """One pod per (zone, instance type): each is its own node group, so its own CreateFleet."""
    for zone in ZONES:
        for name in TYPES:
            pod = inflate_pod(f"pinned-{zone[-1]}-{name.replace('.', '-')}", app="pinned", cpu="100m")
            pod["spec"]["nodeSelector"] = {"topology.kubernetes.io/zone": zone,
                                           "node.kubernetes.io/instance-type": name}
            local.kube.store.create("pods", pod)


def test_every_node_group_of_a_burst_launches_in_one_wave(local: LocalCluster) -> None:
    # GIVEN 33 node groups (more than a wave of 32 held before) and an EC2 whose CreateFleet answers only once
    # every group's call is in flight together
    _pinned_pods(local)
    rt = local.runtime()
    groups = len(provisioner_for(rt, dry_run=True).run_pass().groups)  # the offered (zone, type) pairs
    assert groups > 32 and groups <= provisioner_module.LAUNCH_THREADS
    together = threading.Barrier(groups, timeout=120)

    def meet(**_: Any) -> None:
        together.wait()

    local.session.events.register("before-send.ec2.CreateFleet", meet)
    # WHEN one pass launches them
    answer = local.invoke_provisioner(remaining_ms=900_000)["passes"][0]
    # THEN no call waited for another to finish: the barrier was reached by all, every group launched
    assert not together.broken
    assert answer["launchedCount"] == groups and not answer.get("failures")


def test_the_launch_prerequisites_are_resolved_beside_the_reads_not_before_the_first_create_fleet(
        local: LocalCluster) -> None:
    # GIVEN a cold container (nothing cached), pending pods, and a launch that starts once the warm-up has listed
    # the cluster's launch templates (in a burst the reads take seconds; here the pass would outrun it)
    threads: dict[str, set[str]] = {}
    order: list[str] = []
    listed = threading.Event()

    def seen(event_name: str, **_: Any) -> None:
        operation = event_name.rsplit(".", maxsplit=1)[-1]
        threads.setdefault(operation, set()).add(threading.current_thread().name.split("_")[0])
        order.append(operation)

    local.session.events.register("before-send", seen)
    local.session.events.register("after-call.ec2.DescribeLaunchTemplates", lambda **_: listed.set())

    def after_listing(**_: Any) -> None:
        listed.wait(timeout=120)

    local.session.events.register("before-send.dynamodb.TransactWriteItems", after_listing)
    local.runtime()
    local.scale("inflate", 3)
    # WHEN a pass launches
    answer = local.invoke_provisioner()["passes"][0]
    assert answer["launchedCount"] >= 1
    # THEN the subnets, security groups, instance profile and the listing of the cluster's launch templates were
    # asked for on the warm-up thread, beside the pass's reads; the launch asked for no template by name before
    # creating its own
    for operation in ("DescribeSecurityGroups", "GetInstanceProfile", "DescribeLaunchTemplates"):
        assert threads[operation] == {"warm-launch"}, operation
    assert order.count("DescribeLaunchTemplates") == 1
    assert order.index("DescribeLaunchTemplates") < order.index("CreateLaunchTemplate") < order.index("CreateFleet")
