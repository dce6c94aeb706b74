"""Reserved capacity through the real provisioner handler, on moto (server) with the capacity
reservation stub (simulator/ec2_reservations.py) and the Kubernetes API emulator: a NodePool allowing
``reserved`` fills its EC2NodeClass's reservation before it launches on-demand, the reservation's count
holds across passes, and the nodes carry Karpenter's capacity-type and reservation labels."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from moto.server import ThreadedMotoServer

from autoscaler.domain.keys import CAPACITY_RESERVATION_ID_LABEL, CAPACITY_TYPE_LABEL
from simulator.local import Catalog, demo_config
from tests.e2e.conftest import make_local

pytestmark = pytest.mark.e2e
ZONE = "us-east-1a"


def reserved_config(capacity_types: list[str]) -> dict[str, Any]:
    demo = demo_config()
    pool = copy.deepcopy(demo.node_pools[0])
    pool["spec"]["template"]["spec"]["requirements"] = [
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": capacity_types},
        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.xlarge", "m5.2xlarge"]},
    ]
    node_class = copy.deepcopy(demo.node_classes[0])
    node_class["spec"]["capacityReservationSelectorTerms"] = [{"tags": {"purpose": "ml-training"}}]
    return {"node_pools": [pool], "node_classes": [node_class]}


def by_capacity_type(instances: list[Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for i in instances:
        out[i.capacity_type] = out.get(i.capacity_type, 0) + 1
    return out


def test_reserved_capacity_is_used_before_on_demand(moto_server: ThreadedMotoServer, local_catalog: Catalog) -> None:
    with make_local(moto_server, local_catalog, **reserved_config(["reserved", "on-demand"])) as env:
        # GIVEN a reservation of two m5.xlarge selected by the EC2NodeClass's tags, and another team's
        rid = env.reservations.add("m5.xlarge", ZONE, 2, tags={"purpose": "ml-training"})
        env.reservations.add("m5.xlarge", ZONE, 5, tags={"purpose": "batch"})
        # AND three pods that each need a node of their own (3 CPU on 4-vCPU nodes)
        env.scale("inflate", 3, cpu="3")
        # WHEN the provisioner runs
        env.invoke_provisioner()
        # THEN two nodes run in the reservation (its launch template targets it) and the third on-demand
        instances = env.instances()
        assert by_capacity_type(instances) == {"reserved": 2, "on-demand": 1}
        assert {i.reservation_id for i in instances if i.capacity_type == "reserved"} == {rid}
        assert env.reservations.reservations[rid].available == 0
        # AND the nodes register with capacity type reserved and the reservation's id
        env.register_nodes()
        labels = [n["metadata"]["labels"] for n in env.kube.store.objects("nodes")]
        assert sorted(lbl[CAPACITY_TYPE_LABEL] for lbl in labels) == ["on-demand", "reserved", "reserved"]
        assert {lbl.get(CAPACITY_RESERVATION_ID_LABEL) for lbl in labels} == {rid, None}
        # AND once registered (the next pass lifts the registration taint) every pod binds
        env.invoke_provisioner()
        env.schedule_pods()
        assert not env.pending_pods()
        assert by_capacity_type(env.instances()) == {"reserved": 2, "on-demand": 1}
        # WHEN a fourth pod comes in a later pass
        env.scale("inflate", 4, cpu="3")
        env.invoke_provisioner()
        # THEN the full reservation is not tried again: it launches on-demand
        assert by_capacity_type(env.instances()) == {"reserved": 2, "on-demand": 2}
        assert [launch.reservation_id for launch in env.reservations.launches] == [rid]


def test_a_reserved_only_pool_launches_no_more_than_the_reservation(moto_server: ThreadedMotoServer,
                                                                    local_catalog: Catalog) -> None:
    with make_local(moto_server, local_catalog, **reserved_config(["reserved"])) as env:
        # GIVEN a NodePool allowing only reserved capacity, and a reservation of one
        env.reservations.add("m5.xlarge", ZONE, 1, tags={"purpose": "ml-training"})
        env.scale("inflate", 2, cpu="3")
        # WHEN the provisioner runs
        env.invoke_provisioner()
        # THEN one node runs in the reservation and nothing launches on-demand or spot for the other pod
        assert by_capacity_type(env.instances()) == {"reserved": 1}
