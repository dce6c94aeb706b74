"""Static NodePools (``spec.replicas``) in the provisioner, end to end on moto (server) and the Kubernetes
API emulator: the pool is kept at its node count whatever the pods, never past ``limits.nodes``, and pods
never make it launch."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from moto.server import ThreadedMotoServer

from autoscaler.domain.keys import NODEPOOL_HASH_TAG, NODEPOOL_TAG
from simulator.local import Catalog, demo_config
from tests.e2e.conftest import make_local

pytestmark = pytest.mark.e2e


def static_pool(*, replicas: int, limits: dict[str, Any] | None = None) -> dict[str, Any]:
    pool = copy.deepcopy(demo_config().node_pools[0])
    pool["metadata"] = {"name": "fixed"}
    pool["spec"].pop("limits", None)
    pool["spec"].pop("disruption", None)
    pool["spec"]["replicas"] = replicas
    if limits:
        pool["spec"]["limits"] = limits
    return pool


def fixed(instances: list[Any]) -> list[Any]:
    return [i for i in instances if i.tags.get(NODEPOOL_TAG) == "fixed"]


@pytest.mark.parametrize(("replicas", "limits", "want"), [
    (3, None, 3),
    (3, {"nodes": 2}, 2),  # limits.nodes caps the count
    (0, None, 0),
])
def test_a_static_pool_is_kept_at_its_replicas_without_pods(moto_server: ThreadedMotoServer, local_catalog: Catalog,
                                                            replicas: int, limits: dict[str, Any] | None,
                                                            want: int) -> None:
    with make_local(moto_server, local_catalog, node_pools=[static_pool(replicas=replicas, limits=limits)]) as env:
        # GIVEN a static pool and no pods at all WHEN the provisioner runs
        env.invoke_provisioner()
        # THEN it launches the pool's nodes, each tagged with the pool and its template hash
        launched = fixed(env.instances())
        assert len(launched) == want
        assert all(i.tags.get(NODEPOOL_HASH_TAG) for i in launched)
        # WHEN it runs again, before and after the nodes register
        env.invoke_provisioner()
        assert len(fixed(env.instances())) == want  # in-flight launches count
        env.register_nodes()
        env.invoke_provisioner()
        # THEN nothing more launches
        assert len(fixed(env.instances())) == want


def test_pods_never_launch_into_a_static_pool(moto_server: ThreadedMotoServer, local_catalog: Catalog) -> None:
    with make_local(moto_server, local_catalog, node_pools=[static_pool(replicas=1)]) as env:
        # GIVEN a static pool of one node, registered
        env.invoke_provisioner()
        env.register_nodes()
        # WHEN far more pods arrive than that node holds
        env.scale("inflate", 40)
        result = env.invoke_provisioner()["passes"][0]
        # THEN no node is launched for them: the pool keeps its one node and the rest stay pending
        assert len(fixed(env.instances())) == 1
        assert result["unschedulable"]


def test_a_static_pool_replaces_a_node_that_left(moto_server: ThreadedMotoServer, local_catalog: Catalog) -> None:
    with make_local(moto_server, local_catalog, node_pools=[static_pool(replicas=2)]) as env:
        # GIVEN a static pool of two registered nodes
        env.invoke_provisioner()
        env.register_nodes()
        # WHEN one node is deleting (its instance going away)
        [first, _] = sorted(n["metadata"]["name"] for n in env.kube.store.objects("nodes"))
        # (a finalizer holds it while it is deleted, as the API server does: deletionTimestamp set, object kept)
        env.kube.store.patch("nodes", None, first, {"metadata": {"finalizers": ["example.com/hold"]}})
        env.kube.store.delete("nodes", None, first)
        assert env.kube.store.get("nodes", None, first)["metadata"].get("deletionTimestamp")
        env.invoke_provisioner()
        # THEN a replacement launches: two staying nodes again
        assert len(fixed(env.instances())) == 3


def test_a_static_node_being_replaced_is_not_planned_as_leaving(moto_server: ThreadedMotoServer,
                                                                 local_catalog: Catalog) -> None:
    with make_local(moto_server, local_catalog, node_pools=[static_pool(replicas=1)]) as env:
        # GIVEN a static pool of one registered node running pods, which the disruption function is
        # replacing (drift): replacement requested, and the request sent to the provisioner
        env.invoke_provisioner()
        env.register_nodes()
        env.invoke_provisioner()  # the node is Ready: its registration taint goes
        env.scale("inflate", 1)
        assert env.schedule_pods() and env.pending_pods() == []
        [name] = [n["metadata"]["name"] for n in env.kube.store.objects("nodes")]
        env.kube.store.patch("nodes", None, name, {"metadata": {"annotations": {
            "autoscaler.eks.aws/owner": "disruption", "autoscaler.eks.aws/drain-reason": "drifted",
            "autoscaler.eks.aws/replacement-requested": "1"}}})
        result = env.invoke_provisioner({"source": "disruption", "kind": "replacement", "nodes": [name],
                                         "unavailable": [], "eventId": "disruption-drifted-1"})["passes"][0]
        # THEN exactly one template node launches for the pool; its pods are not pending meanwhile
        assert len(fixed(env.instances())) == 2
        assert result["pendingPods"] == 0 and result["unschedulable"] == []
