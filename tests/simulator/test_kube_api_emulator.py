"""What only the Kubernetes API emulator has: its PDB status arithmetic (it runs no workload controllers, so
``expectedPods`` counts the matching pods; docs/development.md), kubectl against it, its module entry point
and its request counters. Everything it shares with kube-apiserver is held to the real server by the contract
suite (``tests/adapters/contract/``, e.g. ``test_api_semantics_contract.py``)."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.request
from typing import Any

import pytest
from kubernetes import client as k8s

from simulator.kube_api import KubeApiServer, client_for
from simulator.kube_store import pdb_status
from tests.kube_objects import node, pdb, pod


@pytest.fixture
def core(kube_api: KubeApiServer) -> k8s.CoreV1Api:
    return k8s.CoreV1Api(client_for(kube_api.url))


def _names(items: Any) -> list[str]:
    return sorted(i.metadata.name for i in items)


@pytest.mark.parametrize(("spec", "ready", "total", "expected"), [
    ({"min_available": 2}, 3, 4, (4, 3, 2, 1)),
    ({"min_available": "50%"}, 2, 3, (3, 2, 2, 0)),       # 50% of 3 rounds up to 2
    ({"max_unavailable": 1}, 4, 4, (4, 4, 3, 1)),
    ({"max_unavailable": "25%"}, 3, 5, (5, 3, 3, 0)),     # 25% of 5 rounds up to 2 unavailable
    ({"max_unavailable": 0}, 3, 3, (3, 3, 3, 0)),
])
def test_pdb_arithmetic(spec: dict[str, Any], ready: int, total: int, expected: tuple[int, ...]) -> None:
    pods = [pod(f"p{i}", node="n1", labels={"app": "a"}, ready=i < ready) for i in range(total)]
    st = pdb_status(pdb("b", match={"app": "a"}, **spec) | {"metadata": {"name": "b", "namespace": "default"}}, pods)
    assert (st.expected_pods, st.current_healthy, st.desired_healthy, st.disruptions_allowed) == expected


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kubectl_get_create_and_cordon(kube_api: KubeApiServer, tmp_path: Any) -> None:
    def kubectl(*args: str) -> str:
        return subprocess.run(["kubectl", "--server", kube_api.url, *args], check=True, capture_output=True,
                              text=True, timeout=30).stdout

    manifest = tmp_path / "node.json"
    manifest.write_text(json.dumps({"apiVersion": "v1", "kind": "Node", **node("n1")}))
    kubectl("create", "--validate=false", "-f", str(manifest))
    assert "n1" in kubectl("get", "nodes")
    kubectl("cordon", "n1")
    assert kube_api.store.get("nodes", None, "n1")["spec"]["unschedulable"] is True
    kube_api.store.create("pods", pod("p"))
    assert "p" in kubectl("get", "pods", "-A", "--field-selector", "spec.nodeName=")


def test_runs_as_a_module(tmp_path: Any) -> None:
    import socket
    import sys
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "simulator.kube_api", "--port", str(port)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == f"Kubernetes API emulator on http://127.0.0.1:{port}"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/namespaces", timeout=10) as resp:
            names = {ns["metadata"]["name"] for ns in json.load(resp)["items"]}
        assert {"default", "kube-system"} <= names
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_requests_are_counted_by_verb_and_resource(kube_api: KubeApiServer,
                                                                       core: k8s.CoreV1Api) -> None:
    # GIVEN a pod; WHEN it is read, listed twice and an Event is posted
    kube_api.store.create("pods", pod("p1", node="n1"))
    before = kube_api.requests()
    core.read_namespaced_pod("p1", "default")
    core.list_pod_for_all_namespaces()
    core.list_namespaced_pod("default")
    core.create_namespaced_event("default", k8s.CoreV1Event(
        metadata=k8s.V1ObjectMeta(name="e1"), involved_object=k8s.V1ObjectReference(kind="Pod", name="p1")))
    got = {k: v - before.get(k, 0) for k, v in kube_api.requests().items() if v - before.get(k, 0)}
    # THEN each request is counted once under its verb and resource (namespaced or not)
    assert got == {"GET pods": 3, "POST events": 1}
    # and the same counts are served over HTTP for an emulator in another process
    with urllib.request.urlopen(f"{kube_api.url}/_emulator/stats", timeout=5) as answer:
        assert json.loads(answer.read())["requests"]["GET pods"] >= 3
