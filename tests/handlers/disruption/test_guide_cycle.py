"""The getting-started guides' cycle: ``inflate`` 0 -> 5 (the provisioner launches) -> 0 (the disruption
function removes the empty nodes after ``ttlSecondsAfterEmpty``), moto's instance count back to its start.

The provisioner handler is being written in parallel (issue 7); until it lands, the provisioning step is
driven through the same steps it runs: ``gather_plan_input`` + ``plan`` + ``fleet_request_for`` +
``cloud.launch``, and the kubelet's part (register the Node, bind the pods) is played by the test.
"""

from __future__ import annotations

from typing import Any

from autoscaler.domain.cluster_state import gather_plan_input
from autoscaler.domain.launching import fleet_request_for
from autoscaler.domain.scheduler import plan

# The guide's Provisioner (karpenter.sh/v1alpha5), narrowed to two families to keep the test fast.
PROVISIONER = {"apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner", "metadata": {"name": "default"},
               "spec": {"ttlSecondsAfterEmpty": 30, "providerRef": {"name": "default"},
                        "requirements": [{"key": "karpenter.k8s.aws/instance-family", "operator": "In",
                                          "values": ["m5", "c5"]}]}}


def _provision(w: Any) -> list[str]:
    rt = w.runtime
    snap = gather_plan_input(cluster=rt.cluster, cloud=rt.cloud, node_pools=rt.node_pools,
                             node_classes=rt.node_classes, region=rt.config.region)
    result = plan(snap, unavailable=rt.cloud.unavailable())
    assert not result.unschedulable
    names = []
    for launch in result.launches:
        request = fleet_request_for(launch, cluster_name=rt.config.cluster_name,
                                    node_pools={p.name: p for p in rt.node_pools}, node_classes=rt.node_classes)
        [launched] = rt.cloud.launch(request).launched
        name = w.register(launched.instance_id)
        names.append(name)
        for key in launch.pods:
            ns, pod_name = key.split("/")
            w.store.bind(ns, pod_name, name)
            w.store.set_pod_ready(ns, pod_name)
    return names


def test_inflate_up_to_five_and_back_to_zero(make_world: Any) -> None:
    w = make_world(pools=[PROVISIONER])
    start = len(w.live_instances())

    for i in range(5):  # kubectl scale deployment inflate --replicas 5
        w.pod(f"inflate-{i}", None, cpu="1", memory="1536Mi", labels={"app": "inflate"})
    nodes = _provision(w)
    assert nodes and len(w.live_instances()) == start + len(nodes)
    assert sum(len(w.pods_on(n)) for n in nodes) == 5

    w.clock.advance(60)
    assert w.run()["decisions"] == []  # busy nodes stay

    for i in range(5):  # kubectl scale deployment inflate --replicas 0
        w.store.delete("pods", "default", f"inflate-{i}")
    w.run()  # seen empty: the empty-since annotation is set
    w.clock.advance(20)
    assert w.run()["removed"] == []  # not yet 30 s
    removed: list[str] = []
    for _ in range(len(nodes)):  # the default budget (10%) may let one node go per pass
        w.clock.advance(15)
        removed += w.run()["removed"]

    assert sorted(removed) == sorted(nodes) and w.nodes() == {}
    assert len(w.live_instances()) == start
