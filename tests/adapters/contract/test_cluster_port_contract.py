"""The ``ClusterPort`` as its callers see it, beyond what the request-level files cover: writes to a node
that is gone, every collection the planner reads, a refused Event, and the pending-pod watch. Each test runs
against the real kube-apiserver, the emulator and the service tests' in-memory fake (``@port_level``)."""

from __future__ import annotations

import pytest

from autoscaler.app.ports import ClusterError, NotFoundError
from autoscaler.domain.models import ObjectRef, Taint
from tests.adapters.contract.conftest import Server, port_level
from tests.kube_objects import node, pdb, pod

pytestmark = pytest.mark.contract
ZONE = "topology.kubernetes.io/zone"


@port_level
def test_writes_to_a_node_that_is_gone_raise_not_found_or_answer_false(server: Server, node_name: str) -> None:
    cluster = server.cluster()
    for write in (lambda: cluster.cordon(node_name), lambda: cluster.uncordon(node_name),
                  lambda: cluster.add_taint(node_name, Taint("k", "NoSchedule")),
                  lambda: cluster.label_node(node_name, {"a": "b"}),
                  lambda: cluster.annotate_node(node_name, {"a": "b"})):
        with pytest.raises(NotFoundError) as err:
            write()
        assert err.value.status == 404
    # The two the port calls idempotent removals: nothing to remove is not an error.
    assert cluster.remove_taint(node_name, key="k") is False
    assert cluster.delete_node(node_name) is False


@port_level
def test_the_planners_collections_are_read_as_parsed(server: Server, ns: str) -> None:
    never = {"contract.test/never": "true"}  # the real DaemonSet controller must not place pods of another test
    server.create(f"/apis/apps/v1/namespaces/{ns}/daemonsets", {
        "metadata": {"name": "agent", "namespace": ns},
        "spec": {"selector": {"matchLabels": {"app": "agent"}},
                 "template": {"metadata": {"labels": {"app": "agent"}},
                              "spec": {"nodeSelector": never, "containers": [{
                                  "name": "a", "image": "busybox",
                                  "resources": {"requests": {"cpu": "50m", "memory": "32Mi"}}}]}}}})
    server.create(f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets",
                  pdb("web", namespace=ns, match={"app": "web"}, min_available=1))
    server.create(f"/api/v1/namespaces/{ns}/persistentvolumeclaims", {
        "metadata": {"name": "data", "namespace": ns},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": f"none-{ns}",
                 "resources": {"requests": {"storage": "1Gi"}}}})
    server.create("/apis/storage.k8s.io/v1/storageclasses", {
        "metadata": {"name": f"sc-{ns}"}, "provisioner": "ebs.csi.aws.com", "volumeBindingMode": "WaitForFirstConsumer",
        "allowedTopologies": [{"matchLabelExpressions": [{"key": ZONE, "values": ["us-east-1b"]}]}]})
    server.create("/api/v1/persistentvolumes", {
        "metadata": {"name": f"pv-{ns}"},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": f"sc-{ns}",
                 "hostPath": {"path": "/tmp/contract"},
                 "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                     {"key": ZONE, "operator": "In", "values": ["us-east-1c"]}]}]}}}})
    try:
        cluster = server.cluster()
        [agent] = [d for d in cluster.daemonsets() if d.namespace == ns]
        assert agent.name == "agent" and agent.template.requests["cpu"] == 50
        [budget] = [b for b in cluster.pdbs() if b.namespace == ns]
        assert (budget.name, budget.min_available) == ("web", 1)
        [claim] = [c for c in cluster.pvcs() if c.namespace == ns]
        assert (claim.name, claim.storage_class, claim.volume_name) == ("data", f"none-{ns}", None)
        [volume] = [v for v in cluster.pvs() if v.name == f"pv-{ns}"]
        assert volume.zones == ("us-east-1c",)
        [klass] = [s for s in cluster.storage_classes() if s.name == f"sc-{ns}"]
        assert (klass.volume_binding_mode, klass.zones) == ("WaitForFirstConsumer", ("us-east-1b",))
    finally:
        server.request("DELETE", f"/api/v1/persistentvolumes/pv-{ns}")
        server.request("DELETE", f"/apis/storage.k8s.io/v1/storageclasses/sc-{ns}")


@port_level
def test_an_event_the_server_refuses_is_false_or_with_strict_raised(server: Server, ns: str) -> None:
    cluster = server.cluster()
    elsewhere = ObjectRef(kind="NodePool", name="default", namespace=f"{ns}-missing", uid="u-1",
                          api_version="karpenter.sh/v1")
    assert cluster.record_event(elsewhere, reason="Pool", message="m") is False
    with pytest.raises(ClusterError) as err:
        cluster.record_event(elsewhere, reason="Pool", message="m", strict=True)
    assert err.value.status == 404


@port_level
def test_the_pending_pod_watch_yields_pods_that_became_pending_since_a_version(
        server: Server, ns: str, node_name: str) -> None:
    server.create("/api/v1/nodes", node(node_name))
    cluster = server.cluster()
    seen = cluster.get_node(node_name)
    assert seen is not None and seen.resource_version
    server.create(f"/api/v1/namespaces/{ns}/pods", pod("bound", namespace=ns, node=node_name))
    server.create(f"/api/v1/namespaces/{ns}/pods", pod("waiting", namespace=ns))
    watched = [p.name for p in cluster.watch_pending_pods(timeout_seconds=1, resource_version=seen.resource_version)
               if p.namespace == ns]
    assert watched and set(watched) == {"waiting"}
