"""The Kubernetes API emulator, driven by the official client's generated API classes and kubectl."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
import urllib.request
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from simulator.kube_api import KubeApiServer, client_for
from simulator.kube_store import pdb_status
from tests.kube_objects import node, pdb, pod


@pytest.fixture
def core(kube_api: KubeApiServer) -> k8s.CoreV1Api:
    return k8s.CoreV1Api(client_for(kube_api.url))


def _names(items: Any) -> list[str]:
    return sorted(i.metadata.name for i in items)


@pytest.mark.parametrize(("selector", "expected"), [
    ("spec.nodeName=", ["pending"]),
    ("spec.nodeName=n1", ["done", "on-n1"]),
    ("spec.nodeName!=n1", ["on-n2", "pending"]),
    ("status.phase=Running", ["on-n1", "on-n2"]),
    ("status.phase!=Succeeded,status.phase!=Failed", ["on-n1", "on-n2", "pending"]),
    ("metadata.name=done", ["done"]),
])
def test_pod_field_selectors(kube_api: KubeApiServer, core: k8s.CoreV1Api, selector: str,
                             expected: list[str]) -> None:
    for p in (pod("pending"), pod("on-n1", node="n1"), pod("on-n2", node="n2"),
              pod("done", node="n1", phase="Succeeded")):
        kube_api.store.create("pods", p)
    assert _names(core.list_pod_for_all_namespaces(field_selector=selector).items) == expected


@pytest.mark.parametrize(("selector", "expected"), [
    ("app=web", ["a", "b"]), ("app==web", ["a", "b"]), ("app!=web", ["c", "d"]),
    ("app in (web,db)", ["a", "b", "c"]), ("app notin (web)", ["c", "d"]),
    ("tier", ["a", "c"]), ("!tier", ["b", "d"]), ("app=web,tier", ["a"]),
])
def test_label_selectors(kube_api: KubeApiServer, core: k8s.CoreV1Api, selector: str, expected: list[str]) -> None:
    for name, labels in {"a": {"app": "web", "tier": "1"}, "b": {"app": "web"}, "c": {"app": "db", "tier": "2"},
                         "d": {}}.items():
        kube_api.store.create("pods", pod(name, labels=labels))
    assert _names(core.list_namespaced_pod("default", label_selector=selector).items) == expected


def test_unsupported_field_selector_is_a_400(core: k8s.CoreV1Api) -> None:
    with pytest.raises(ApiException) as err:
        core.list_node(field_selector="status.phase=Ready")
    assert err.value.status == 400 and "field label not supported" in err.value.body


def test_limit_and_continue(kube_api: KubeApiServer, core: k8s.CoreV1Api) -> None:
    for i in range(7):
        kube_api.store.create("nodes", node(f"n{i}"))
    seen, token, pages = [], None, 0
    while True:
        page = core.list_node(limit=3, _continue=token)
        seen += [n.metadata.name for n in page.items]
        pages += 1
        token = page.metadata._continue
        if not token:
            break
    assert seen == [f"n{i}" for i in range(7)] and pages == 3


def test_create_get_delete_and_resource_versions(core: k8s.CoreV1Api) -> None:
    with pytest.raises(ApiException) as missing:  # NamespaceLifecycle: no namespace, no pod
        core.create_namespaced_pod("team", pod("p", namespace="team"))
    assert missing.value.status == 404
    core.create_namespace({"metadata": {"name": "team"}})
    created = core.create_namespaced_pod("team", pod("p", namespace="team"))
    got = core.read_namespaced_pod("p", "team")
    assert got.metadata.uid == created.metadata.uid and got.status.phase == "Pending"
    with pytest.raises(ApiException) as dup:
        core.create_namespaced_pod("team", pod("p", namespace="team"))
    assert dup.value.status == 409
    patched = core.patch_namespaced_pod("p", "team", {"metadata": {"labels": {"x": "y"}}})
    assert int(patched.metadata.resource_version) > int(created.metadata.resource_version)
    core.delete_namespaced_pod("p", "team")
    with pytest.raises(ApiException) as gone:
        core.read_namespaced_pod("p", "team")
    assert gone.value.status == 404 and json.loads(gone.value.body)["reason"] == "NotFound"


def test_finalizers_hold_a_delete_until_they_are_removed(kube_api: KubeApiServer, core: k8s.CoreV1Api) -> None:
    # Given a Node carrying Karpenter's termination finalizer and a watch on nodes
    body = node("n1")
    body["metadata"]["finalizers"] = ["karpenter.sh/termination", "example.com/other"]
    kube_api.store.create("nodes", body)
    # When it is deleted through the API
    core.delete_node("n1")
    # Then, as on a real API server, it stays (readable) with a deletionTimestamp
    held = core.read_node("n1")
    assert held.metadata.deletion_timestamp is not None
    assert held.metadata.finalizers == ["karpenter.sh/termination", "example.com/other"]
    # ... a second delete changes nothing, no finalizer may be added and the timestamp cannot be cleared
    core.delete_node("n1")
    with pytest.raises(ApiException) as forbidden:
        core.patch_node("n1", {"metadata": {"finalizers": [*held.metadata.finalizers, "new.example.com/x"]}})
    assert forbidden.value.status == 422 and "no new finalizers" in forbidden.value.body
    kube_api.store.patch("nodes", None, "n1", {"metadata": {"deletionTimestamp": None}})
    assert kube_api.store.get("nodes", None, "n1")["metadata"]["deletionTimestamp"]
    # When one finalizer is removed the object is still there; when the last one goes, so does the object
    # (a merge patch: a strategic merge patch unions finalizer lists)
    kube_api.store.patch("nodes", None, "n1", {"metadata": {"finalizers": ["example.com/other"]}})
    assert core.read_node("n1").metadata.finalizers == ["example.com/other"]
    kube_api.store.patch("nodes", None, "n1", [{"op": "remove", "path": "/metadata/finalizers/0"}],
                         content_type="application/json-patch+json")
    with pytest.raises(ApiException) as gone:
        core.read_node("n1")
    assert gone.value.status == 404


def test_a_node_without_finalizers_goes_at_once(kube_api: KubeApiServer, core: k8s.CoreV1Api) -> None:
    # Given a Node with no finalizers; When deleted; Then it is gone, and an update cannot fake a deletion
    kube_api.store.create("nodes", node("n2"))
    kube_api.store.patch("nodes", None, "n2", {"metadata": {"deletionTimestamp": "2024-01-01T00:00:00Z"}})
    assert "deletionTimestamp" not in kube_api.store.get("nodes", None, "n2")["metadata"]
    core.delete_node("n2")
    with pytest.raises(ApiException) as gone:
        core.read_node("n2")
    assert gone.value.status == 404


def test_stale_resource_version_is_a_conflict(kube_api: KubeApiServer, core: k8s.CoreV1Api) -> None:
    kube_api.store.create("nodes", node("n1"))
    with pytest.raises(ApiException) as err:
        core.patch_node("n1", {"metadata": {"resourceVersion": "1"}, "spec": {"unschedulable": True}})
    assert err.value.status == 409


def test_strategic_merge_patch_as_kubectl_sends_it(kube_api: KubeApiServer) -> None:
    st = kube_api.store
    st.create("nodes", node("n1", taints=[{"key": "a", "effect": "NoSchedule"}]))
    smp = "application/strategic-merge-patch+json"
    st.patch("nodes", None, "n1", {"spec": {"unschedulable": True}}, content_type=smp)
    st.patch("nodes", None, "n1", {"spec": {"taints": [{"key": "b", "effect": "NoExecute"}]},
                                   "metadata": {"labels": {"l": "1"}, "annotations": {"n": "1"}}}, content_type=smp)
    n = st.get("nodes", None, "n1")
    assert n["spec"]["unschedulable"] is True
    assert n["spec"]["taints"] == [{"key": "b", "effect": "NoExecute"}]  # taints are atomic: replaced
    assert n["metadata"]["labels"]["l"] == "1" and n["metadata"]["annotations"] == {"n": "1"}
    st.create("pods", {"metadata": {"name": "p", "finalizers": ["a"]}, "spec": {"containers": [
        {"name": "app", "image": "v1"}, {"name": "side", "image": "s1"}]}})
    st.patch("pods", "default", "p", {"metadata": {"finalizers": ["b"]}, "spec": {"containers": [
        {"name": "app", "image": "v2"}, {"name": "side", "$patch": "delete"}]}}, content_type=smp)
    p = st.get("pods", "default", "p")
    assert p["metadata"]["finalizers"] == ["a", "b"]
    assert p["spec"]["containers"] == [{"name": "app", "image": "v2"}]


def test_json_patch(kube_api: KubeApiServer) -> None:
    kube_api.store.create("nodes", node("n1"))
    kube_api.store.patch("nodes", None, "n1", [
        {"op": "add", "path": "/metadata/labels/x~1y", "value": "1"},
        {"op": "replace", "path": "/spec/taints", "value": [{"key": "k", "effect": "NoSchedule"}]},
        {"op": "test", "path": "/metadata/name", "value": "n1"},
    ], content_type="application/json-patch+json")
    n = kube_api.store.get("nodes", None, "n1")
    assert n["metadata"]["labels"]["x/y"] == "1" and n["spec"]["taints"] == [{"key": "k", "effect": "NoSchedule"}]


def test_binding_subresource(kube_api: KubeApiServer, core: k8s.CoreV1Api) -> None:
    kube_api.store.create("pods", pod("p"))
    core.create_namespaced_pod_binding("p", "default", {"metadata": {"name": "p"},
                                                        "target": {"kind": "Node", "name": "n1"}},
                                       _preload_content=False)
    got = kube_api.store.get("pods", "default", "p")
    assert got["spec"]["nodeName"] == "n1"
    assert {"type": "PodScheduled", "status": "True"}.items() <= got["status"]["conditions"][0].items()


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


def test_eviction_429_carries_a_status_body(kube_api: KubeApiServer, core: k8s.CoreV1Api) -> None:
    kube_api.store.create("poddisruptionbudgets", pdb("b", match={"app": "a"}, min_available=1))
    kube_api.store.create("pods", pod("p", node="n1", labels={"app": "a"}, ready=True))
    policy = k8s.PolicyV1Api(client_for(kube_api.url))
    assert policy.read_namespaced_pod_disruption_budget("b", "default").status.disruptions_allowed == 0
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod_eviction("p", "default", {"metadata": {"name": "p", "namespace": "default"}})
    body = json.loads(err.value.body)
    assert err.value.status == 429
    assert (body["kind"], body["reason"], body["code"]) == ("Status", "TooManyRequests", 429)
    assert body["details"]["causes"][0]["reason"] == "DisruptionBudget"


def test_pods_matching_two_pdbs_cannot_be_evicted(kube_api: KubeApiServer, core: k8s.CoreV1Api) -> None:
    kube_api.store.create("poddisruptionbudgets", pdb("one", match={"app": "a"}, max_unavailable=5))
    kube_api.store.create("poddisruptionbudgets", pdb("two", match={"app": "a"}, max_unavailable=5))
    kube_api.store.create("pods", pod("p", node="n1", labels={"app": "a"}, ready=True))
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod_eviction("p", "default", {"metadata": {"name": "p"}})
    assert err.value.status == 500 and "more than one PodDisruptionBudget" in err.value.body


def test_watch_stream_with_resource_version(kube_api: KubeApiServer, core: k8s.CoreV1Api) -> None:
    st = kube_api.store
    st.create("pods", pod("before"))
    rv = core.list_namespaced_pod("default").metadata.resource_version

    def churn() -> None:
        time.sleep(0.2)
        st.create("pods", pod("p"))
        st.patch("pods", "default", "p", {"metadata": {"labels": {"x": "1"}}})
        st.bind("default", "p", "n1")  # leaves the spec.nodeName= selection: DELETED for this watch
        st.create("pods", pod("q"))
        st.delete("pods", "default", "q")

    threading.Thread(target=churn, daemon=True).start()
    seen = []
    for event in watch.Watch().stream(core.list_namespaced_pod, "default", resource_version=rv,
                                      field_selector="spec.nodeName=", timeout_seconds=5):
        seen.append((event["type"], event["object"].metadata.name))
        if len(seen) == 5:
            break
    assert seen == [("ADDED", "p"), ("MODIFIED", "p"), ("DELETED", "p"), ("ADDED", "q"), ("DELETED", "q")]


def test_injected_errors_hit_only_matching_paths(kube_api: KubeApiServer, core: k8s.CoreV1Api) -> None:
    kube_api.inject_error("/nodes", 503, 1)
    assert core.list_namespaced_pod("default").items == []
    with pytest.raises(ApiException) as err:
        core.list_node()
    assert err.value.status == 503
    assert core.list_node().items == []


def test_discovery(core: k8s.CoreV1Api, kube_api: KubeApiServer) -> None:
    api = client_for(kube_api.url)
    assert k8s.VersionApi(api).get_code().git_version.startswith("v1.")
    groups = {g.name for g in k8s.ApisApi(api).get_api_versions().groups}
    assert {"apps", "policy", "storage.k8s.io"} <= groups
    names = {r.name for r in core.get_api_resources().resources}
    assert {"pods", "pods/eviction", "pods/binding", "nodes", "events", "persistentvolumeclaims",
            "persistentvolumes", "namespaces"} <= names


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
