"""Issue 33 item 12: a node is recorded as replacement-provisioned only once every pod on it has a place;
a replacement launch that fails leaves the request open, so a later pass plans for it again."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from simulator.local import Catalog
from tests.adapters.aws.helpers import CapacityFault
from tests.e2e.conftest import make_local

pytestmark = pytest.mark.e2e

REQUESTED = "autoscaler.eks.aws/replacement-requested"
PROVISIONED = "autoscaler.eks.aws/replacement-provisioned"


def _annotations(env: Any, node: str) -> dict[str, str]:
    return dict(env.kube.store.get("nodes", None, node)["metadata"].get("annotations") or {})


def test_issue33_item_12_a_failed_replacement_launch_does_not_mark_the_node_provisioned(
        moto_server: Any, local_catalog: Catalog) -> None:
    with make_local(moto_server, local_catalog) as env:  # the demo pool allows spot only
        fault = CapacityFault()
        fault.install(SimpleNamespace(meta=SimpleNamespace(events=env.session.events)))
        env.runtime()
        env.scale("inflate", 2)
        env.invoke_provisioner()
        [node] = env.register_nodes()
        env.invoke_provisioner()  # its registration taint comes off
        env.schedule_pods()
        assert {p["spec"].get("nodeName") for p in env.kube.store.objects("pods")} == {node}
        # Given EC2 has no capacity at all, and the node's replacement was asked for
        names = [i["InstanceType"] for i in local_catalog[0]]
        fault.failing.update({(t, z): "InsufficientInstanceCapacity" for t in names
                              for z in ("us-east-1a", "us-east-1b", "us-east-1c")})
        env.kube.store.patch("nodes", None, node, {"metadata": {"annotations": {REQUESTED: "1700000000"}}})
        # When the passes that serve it cannot launch
        for _ in range(2):
            result = env.invoke_provisioner()["passes"][0]
            assert result["pendingPods"] == 2 and result["launched"] == [] and result["failures"]
            # Then the node is not recorded as provisioned: the next pass plans for its pods again
            assert _annotations(env, node).get(PROVISIONED) in (None, "")
        # When capacity comes back, the next pass launches the replacement and records it
        fault.failing.clear()
        result = env.invoke_provisioner()["passes"][0]
        assert result["launched"]
        assert _annotations(env, node).get(PROVISIONED) == _annotations(env, node)[REQUESTED]

