"""Issue 33 item 3 on the snapshot path: ``autoscaler plan`` reads the host ports of the pods bound to a
snapshot's node (snapshot parsing, ``domain/objects.py``) and keeps a pending pod asking for the same port
off that node, as kube-scheduler's NodePorts filter would."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NODE = "ip-10-0-1-10.ec2.internal"


def _pod(name: str, *, node: str | None = None, namespace: str = "default", phase: str = "",
         protocol: str = "", host_ip: str = "", where: str = "containers") -> dict[str, Any]:
    """A 100m pod holding host port 80 in an app container, a sidecar (``where="sidecar"``) or a
    run-to-completion init container (``where="init"``)."""
    port: dict[str, Any] = {"containerPort": 80, "hostPort": 80}
    if protocol:
        port["protocol"] = protocol
    if host_ip:
        port["hostIP"] = host_ip
    spec: dict[str, Any] = {"containers": [{"name": "app", "image": "nginx",
                                            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}
    if where == "containers":
        spec["containers"][0]["ports"] = [port]
    else:
        spec["initContainers"] = [{"name": "proxy", "image": "envoy", "ports": [port],
                                   **({"restartPolicy": "Always"} if where == "sidecar" else {})}]
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": spec, "status": {"phase": phase or ("Running" if node else "Pending")}}


def _plan(tmp_path: Path, capsys: pytest.CaptureFixture[str], holder: dict[str, Any],
          pending: dict[str, Any]) -> dict[str, Any]:
    snapshot = yaml.safe_load((EXAMPLES / "snapshot-minimal.yaml").read_text())
    snapshot.pop("inFlight")
    snapshot["pods"] = [holder, pending]
    path = tmp_path / "snapshot.yaml"
    path.write_text(yaml.safe_dump(snapshot))
    code = main(["plan", "--snapshot", str(path)])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["unschedulable"] == [], out
    result: dict[str, Any] = out
    return result


@pytest.mark.parametrize(("holder", "pending"), [
    (_pod("holder", node=NODE), _pod("web")),
    (_pod("holder", node=NODE, namespace="kube-system"), _pod("web")),
    (_pod("holder", node=NODE, where="sidecar"), _pod("web")),
    (_pod("holder", node=NODE), _pod("web", where="sidecar")),
    (_pod("holder", node=NODE, host_ip="10.0.1.10"), _pod("web", host_ip="0.0.0.0")),
    (_pod("holder", node=NODE, protocol="UDP"), _pod("web", protocol="UDP")),
], ids=["app-container", "other-namespace", "sidecar-holds", "sidecar-asks", "wildcard-ip", "udp"])
def test_issue33_item_3_snapshot_plan_launches_for_a_host_port_taken_on_the_existing_node(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], holder: dict[str, Any], pending: dict[str, Any]) -> None:
    # Given a snapshot node with room whose pod holds host port 80, and a pending pod asking for it
    out = _plan(tmp_path, capsys, holder, pending)
    # Then the plan launches a node for the pending pod instead of counting on the existing one
    assert "default/web" not in out["existing"]
    assert [p for launch in out["launches"] for p in launch["pods"]] == ["default/web"]


@pytest.mark.parametrize(("holder", "pending"), [
    (_pod("holder", node=NODE), _pod("web", protocol="UDP")),
    (_pod("holder", node=NODE, host_ip="10.0.1.10"), _pod("web", host_ip="10.0.1.11")),
    (_pod("holder", node=NODE, where="init"), _pod("web")),
    (_pod("holder", node=NODE, phase="Succeeded"), _pod("web")),
    (_pod("holder", node=NODE, phase="Failed"), _pod("web")),
], ids=["other-protocol", "other-address", "init-container", "succeeded", "failed"])
def test_issue33_item_3_snapshot_plan_uses_the_existing_node_when_the_port_is_free(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], holder: dict[str, Any], pending: dict[str, Any]) -> None:
    # Given a snapshot node whose pod's host port does not conflict with the pending pod's (or has finished)
    out = _plan(tmp_path, capsys, holder, pending)
    # Then the existing node takes the pending pod: nothing is launched
    assert out["existing"] == {"default/web": NODE} and out["launches"] == []
