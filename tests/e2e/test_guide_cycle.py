"""The getting-started guides' cycle through the real handlers, with moto as a server and the
Kubernetes API emulator: ``inflate`` 0 -> 5 (the provisioner launches spot capacity) -> 0 (the
disruption function removes the empty nodes after ``ttlSecondsAfterEmpty: 30``), and the instance
count back where it started. The test plays kubelet (register the Node, bind the pods) and the
Deployment controller (create and delete the pods)."""

from __future__ import annotations

import time
from typing import Any

from moto.server import ThreadedMotoServer

from autoscaler.adapters.clock import ManualClock
from autoscaler.handlers.disruption import handler as disruption_handler
from simulator.local import Catalog, LocalCluster, demo_config

# The guides' v1alpha5 Provisioner: spot allowed, nodes removed 30 s after they become empty.
PROVISIONER = {"apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner", "metadata": {"name": "default"},
               "spec": {"ttlSecondsAfterEmpty": 30, "providerRef": {"name": "default"},
                        "requirements": [
                            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]},
                            {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5", "c5"]}]}}
SCHEDULED = {"source": "schedule", "kind": "disruption"}


def _disrupt(env: LocalCluster) -> dict[str, Any]:
    result: dict[str, Any] = env.invoke(disruption_handler, SCHEDULED, function_name="disruption")
    return result


def test_inflate_up_to_five_and_back_to_zero(moto_server: ThreadedMotoServer, local_catalog: Catalog) -> None:
    with LocalCluster.start(demo_config(node_pools=[PROVISIONER]), catalog=local_catalog,
                            moto_server=moto_server) as env:
        clock = ManualClock(current=time.time(), mono=time.monotonic())
        env.runtime(clock=clock)
        start = len(env.instances())

        env.scale("inflate", 5)  # kubectl scale deployment inflate --replicas 5
        env.invoke_provisioner()
        launched = env.instances()
        assert launched
        assert {i.capacity_type for i in launched} == {"spot"}
        env.invoke_provisioner()  # before registration: nothing more
        assert len(env.instances()) == len(launched)

        nodes = env.register_nodes()
        assert len(nodes) == len(launched)
        env.invoke_provisioner()  # registering nodes are capacity: no launch; the unregistered taint comes off
        assert len(env.instances()) == len(launched)
        env.schedule_pods()
        assert env.pending_pods() == []
        clock.advance(60)
        _disrupt(env)  # busy nodes stay
        assert len(env.kube.store.objects("nodes")) == len(nodes)

        env.scale("inflate", 0)  # kubectl scale deployment inflate --replicas 0
        _disrupt(env)  # seen empty: the empty-since annotation is set
        clock.advance(20)
        _disrupt(env)
        assert len(env.kube.store.objects("nodes")) == len(nodes), "removed before ttlSecondsAfterEmpty"
        for _ in range(4 * len(nodes)):  # the default budget (10%) lets one node go per pass
            if not env.kube.store.objects("nodes"):
                break
            clock.advance(15)
            _disrupt(env)

        assert env.kube.store.objects("nodes") == []
        assert len(env.instances()) == start
