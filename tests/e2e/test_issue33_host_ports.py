"""Issue 33 item 3 end to end: the host ports of pods already bound to a node, read by the real provisioner
handler from the Kubernetes API emulator (adapter parsing, warm cache, ``gather_plan_input``), keep a pending
pod asking for the same port off that node, as kube-scheduler's NodePorts filter would."""

from __future__ import annotations

from typing import Any

import pytest

from simulator.local import LocalCluster, inflate_pod

pytestmark = pytest.mark.e2e


def _pod(name: str, *, namespace: str = "default", port: int | None = 80, protocol: str | None = None,
         host_ip: str | None = None, where: str = "containers") -> dict[str, Any]:
    """A 100m pod holding host ``port`` in an app container, a sidecar (``where="sidecar"``) or a
    run-to-completion init container (``where="init"``)."""
    pod = inflate_pod(name, app=name, cpu="100m", namespace=namespace)
    spec = pod["spec"]
    if port is None:
        return pod
    entry: dict[str, Any] = {"containerPort": port, "hostPort": port}
    if protocol:
        entry["protocol"] = protocol
    if host_ip:
        entry["hostIP"] = host_ip
    if where == "containers":
        spec["containers"][0]["ports"] = [entry]
    else:
        init: dict[str, Any] = {"name": "proxy", "image": spec["containers"][0]["image"], "ports": [entry]}
        if where == "sidecar":
            init["restartPolicy"] = "Always"
        spec["initContainers"] = [init]
    return pod


def _node_running(local: LocalCluster, holder: dict[str, Any]) -> str:
    """Launch and register a node for ``holder`` and bind it there, Running; returns the node's name."""
    local.runtime()
    local.kube.store.create("pods", holder)
    first = local.invoke_provisioner()["passes"][0]
    assert len(first["launched"]) == 1, first
    (node,) = local.register_nodes()
    assert local.invoke_provisioner()["passes"][0]["launched"] == []  # lifts the registration taint
    meta = holder["metadata"]
    assert local.schedule_pods() == [f"{meta['namespace']}/{meta['name']}"]
    local.kube.store.set_pod_ready(meta["namespace"], meta["name"])
    return node


def _pass_for(local: LocalCluster, pending: dict[str, Any]) -> dict[str, Any]:
    local.kube.store.create("pods", pending)
    result: dict[str, Any] = local.invoke_provisioner()["passes"][0]
    return result


@pytest.mark.parametrize(("holder", "pending"), [
    (_pod("holder"), _pod("web")),
    # a pod of another namespace (a DaemonSet-like system pod) holds the port just the same
    (_pod("holder", namespace="kube-system"), _pod("web")),
    # a sidecar (restartable init container) runs for the pod's life: its host port is held (and asked for)
    (_pod("holder", where="sidecar"), _pod("web")),
    (_pod("holder"), _pod("web", where="sidecar")),
    # the unspecified address (0.0.0.0, or none) overlaps every address
    (_pod("holder", host_ip="10.0.0.7"), _pod("web", host_ip="0.0.0.0")),
    (_pod("holder", protocol="UDP"), _pod("web", protocol="UDP")),
], ids=["app-container", "other-namespace", "sidecar-holds", "sidecar-asks", "wildcard-ip", "udp"])
def test_issue33_item_3_live_pass_launches_for_a_host_port_taken_on_the_existing_node(
        local: LocalCluster, holder: dict[str, Any], pending: dict[str, Any]) -> None:
    # Given a node with room whose running pod holds host port 80
    node = _node_running(local, holder)
    # When a pod asking for the same port (and protocol, on an overlapping address) is pending
    result = _pass_for(local, pending)
    # Then the pass launches a node for it instead of counting on the existing one
    assert len(result["launched"]) == 1, result
    assert result["unschedulable"] == [] and result["failures"] == []
    assert node not in str(result.get("existing", ""))


@pytest.mark.parametrize(("holder", "pending", "finish"), [
    (_pod("holder"), _pod("web", protocol="UDP"), ""),  # 80/TCP and 80/UDP are different ports
    (_pod("holder", host_ip="10.0.0.7"), _pod("web", host_ip="10.0.0.8"), ""),  # distinct addresses
    (_pod("holder", where="init"), _pod("web"), ""),  # an init container that ran to completion holds none
    (_pod("holder"), _pod("web"), "Succeeded"),  # a finished pod holds no port
    (_pod("holder"), _pod("web"), "Failed"),
], ids=["other-protocol", "other-address", "init-container", "succeeded", "failed"])
def test_issue33_item_3_live_pass_uses_the_existing_node_when_the_port_is_free(
        local: LocalCluster, holder: dict[str, Any], pending: dict[str, Any], finish: str) -> None:
    # Given a node with room whose pod holds a host port that does not conflict (or has finished)
    _node_running(local, holder)
    if finish:
        meta = holder["metadata"]
        local.kube.store.patch("pods", meta["namespace"], meta["name"], {"status": {"phase": finish}})
    # When the pending pod's port does not conflict with it
    result = _pass_for(local, pending)
    # Then the existing node takes it: nothing is launched
    assert result["launched"] == [], result
    assert result["unschedulable"] == [] and result["failures"] == []
