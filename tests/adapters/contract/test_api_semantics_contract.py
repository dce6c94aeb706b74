"""API server semantics the simulator and ``kubectl`` against the emulator rely on beyond the product's own
requests (which the other files of this suite cover): field and label selector operators, object lifecycle
with resourceVersions, deletion that an update can neither fake nor undo, strategic merge and JSON patches as
kubectl sends them, the binding subresource and discovery. Each holds on the real kube-apiserver and on the
emulator alike; these were emulator-only tests (``tests/simulator/test_kube_api_emulator.py``) before."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from tests.adapters.contract.conftest import Server
from tests.kube_objects import node, pod

pytestmark = pytest.mark.contract
MERGE, SMP, JSON_PATCH = ("application/merge-patch+json", "application/strategic-merge-patch+json",
                          "application/json-patch+json")


def _pods(ns: str) -> str:
    return f"/api/v1/namespaces/{ns}/pods"


def _listed(server: Server, path: str, **query: str) -> list[str]:
    qs = "&".join(f"{k}={quote(v)}" for k, v in query.items())
    return sorted(i["metadata"]["name"] for i in server.must("GET", f"{path}?{qs}")["items"])


def test_pod_field_selectors(server: Server, ns: str) -> None:
    host = f"n-{ns}"
    server.create(_pods(ns), pod("pending", namespace=ns))
    for name, where in (("on-n1", host), ("on-n2", f"{host}-2"), ("done", host)):
        server.create(_pods(ns), pod(name, namespace=ns, node=where))
        server.status_patch(f"{_pods(ns)}/{name}", {"phase": "Succeeded" if name == "done" else "Running"})
    for selector, expected in (
            ("spec.nodeName=", ["pending"]),
            (f"spec.nodeName={host}", ["done", "on-n1"]),
            (f"spec.nodeName!={host}", ["on-n2", "pending"]),
            ("status.phase=Running", ["on-n1", "on-n2"]),
            ("status.phase!=Succeeded,status.phase!=Failed", ["on-n1", "on-n2", "pending"]),
            ("metadata.name=done", ["done"])):
        assert _listed(server, _pods(ns), fieldSelector=selector) == expected, selector


def test_label_selector_operators(server: Server, ns: str) -> None:
    for name, labels in {"a": {"app": "web", "tier": "1"}, "b": {"app": "web"}, "c": {"app": "db", "tier": "2"},
                         "d": {}}.items():
        server.create(_pods(ns), pod(name, namespace=ns, labels=labels))
    for selector, expected in (
            ("app=web", ["a", "b"]), ("app==web", ["a", "b"]), ("app!=web", ["c", "d"]),
            ("app in (web,db)", ["a", "b", "c"]), ("app notin (web)", ["c", "d"]),
            ("tier", ["a", "c"]), ("!tier", ["b", "d"]), ("app=web,tier", ["a"])):
        assert _listed(server, _pods(ns), labelSelector=selector) == expected, selector


def test_a_field_selector_the_server_does_not_support_is_400(server: Server) -> None:
    status, body = server.request("GET", "/api/v1/nodes?fieldSelector=status.phase%3DReady")
    assert status == 400 and body["reason"] == "BadRequest", body


def test_create_conflict_update_and_delete_with_resource_versions(server: Server, ns: str) -> None:
    created = server.create(_pods(ns), pod("p", namespace=ns))
    status, body = server.request("POST", _pods(ns), pod("p", namespace=ns))
    assert status == 409 and body["reason"] == "AlreadyExists", body
    got = server.get(f"{_pods(ns)}/p")
    assert got is not None and got["metadata"]["uid"] == created["metadata"]["uid"]
    patched = server.must("PATCH", f"{_pods(ns)}/p", {"metadata": {"labels": {"x": "y"}}}, content_type=MERGE)
    assert int(patched["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    server.must("DELETE", f"{_pods(ns)}/p", {"gracePeriodSeconds": 0})
    status, body = server.request("GET", f"{_pods(ns)}/p")
    assert status == 404 and body["reason"] == "NotFound"


def test_an_update_can_neither_fake_nor_undo_a_deletion(server: Server, node_name: str) -> None:
    server.create("/api/v1/nodes", node(node_name))
    path = f"/api/v1/nodes/{node_name}"
    status, body = server.request("PATCH", path, {"metadata": {"deletionTimestamp": "2024-01-01T00:00:00Z"}},
                                  content_type=MERGE)
    assert status == 422 and "field is immutable" in body["message"], body
    current = server.get(path)
    assert current is not None and "deletionTimestamp" not in current["metadata"]
    server.must("PATCH", path, {"metadata": {"finalizers": ["example.com/hold"]}}, content_type=MERGE)
    server.must("DELETE", path)
    held = server.get(path)
    assert held is not None and held["metadata"]["deletionTimestamp"]
    # Of an object being deleted, an update keeps the deletion's time whatever it names.
    for change in ("2024-01-01T00:00:00Z", None):
        server.must("PATCH", path, {"metadata": {"deletionTimestamp": change}}, content_type=MERGE)
        still = server.get(path)
        assert still is not None and still["metadata"]["deletionTimestamp"] == held["metadata"]["deletionTimestamp"]


def test_a_strategic_merge_patch_as_kubectl_sends_it(server: Server, ns: str, node_name: str) -> None:
    server.create("/api/v1/nodes", node(node_name, taints=[{"key": "a", "effect": "NoSchedule"}]))
    path = f"/api/v1/nodes/{node_name}"
    server.must("PATCH", path, {"spec": {"unschedulable": True}}, content_type=SMP)
    server.must("PATCH", path, {"spec": {"taints": [{"key": "b", "effect": "NoExecute"}]},
                                "metadata": {"labels": {"l": "1"}, "annotations": {"n": "1"}}}, content_type=SMP)
    got = server.get(path)
    assert got is not None and got["spec"]["unschedulable"] is True
    # A node's taints are atomic: replaced (the real server stamps a NoExecute taint's timeAdded).
    assert [(t["key"], t["effect"]) for t in got["spec"]["taints"]
            if not t["key"].startswith("node.kubernetes.io/")] == [("b", "NoExecute")]
    assert got["metadata"]["labels"]["l"] == "1" and got["metadata"]["annotations"]["n"] == "1"
    # Finalizers merge (a union), where a merge patch replaces the list.
    held = {**pod("p", namespace=ns), "metadata": {**pod("p", namespace=ns)["metadata"], "finalizers": ["x.io/a"]}}
    server.create(_pods(ns), held)
    server.must("PATCH", f"{_pods(ns)}/p", {"metadata": {"finalizers": ["x.io/b"]}}, content_type=SMP)
    merged = server.get(f"{_pods(ns)}/p")
    assert merged is not None and merged["metadata"]["finalizers"] == ["x.io/b", "x.io/a"]
    server.must("PATCH", f"{_pods(ns)}/p", {"metadata": {"finalizers": None}}, content_type=MERGE)


def test_a_json_patch(server: Server, node_name: str) -> None:
    server.create("/api/v1/nodes", node(node_name))
    server.must("PATCH", f"/api/v1/nodes/{node_name}", [
        {"op": "add", "path": "/metadata/labels/x~1y", "value": "1"},
        {"op": "replace", "path": "/spec/taints", "value": [{"key": "k", "effect": "NoSchedule"}]},
        {"op": "test", "path": "/metadata/name", "value": node_name},
    ], content_type=JSON_PATCH)
    got = server.get(f"/api/v1/nodes/{node_name}")
    assert got is not None and got["metadata"]["labels"]["x/y"] == "1"
    assert [(t["key"], t["effect"]) for t in got["spec"]["taints"]
            if not t["key"].startswith("node.kubernetes.io/")] == [("k", "NoSchedule")]


def test_the_binding_subresource_binds_and_marks_the_pod_scheduled(server: Server, ns: str) -> None:
    server.create(_pods(ns), pod("p", namespace=ns))
    server.must("POST", f"{_pods(ns)}/p/binding", {
        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p", "namespace": ns},
        "target": {"apiVersion": "v1", "kind": "Node", "name": f"n-{ns}"}})
    got = server.get(f"{_pods(ns)}/p")
    assert got is not None and got["spec"]["nodeName"] == f"n-{ns}"
    scheduled = [c for c in got["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert [c["status"] for c in scheduled] == ["True"]
    status, body = server.request("POST", f"{_pods(ns)}/p/binding", {
        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p", "namespace": ns},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "elsewhere"}})
    assert status == 409, body  # bound once


def test_discovery_names_what_kubectl_needs(server: Server) -> None:
    assert server.must("GET", "/version")["gitVersion"]
    groups = {g["name"] for g in server.must("GET", "/apis")["groups"]}
    assert {"apps", "policy", "storage.k8s.io"} <= groups
    names = {r["name"] for r in server.must("GET", "/api/v1")["resources"]}
    assert {"pods", "pods/eviction", "pods/binding", "nodes", "events", "persistentvolumeclaims",
            "persistentvolumes", "namespaces"} <= names


@pytest.mark.parametrize(("expression", "field"), [
    ({"key": "app", "operator": "Gt", "values": ["1"]}, "spec.selector.matchExpressions[0].operator"),
    ({"key": "app", "operator": "In", "values": []}, "spec.selector.matchExpressions[0].values"),
    ({"key": "app", "operator": "Exists", "values": ["web"]}, "spec.selector.matchExpressions[0].values"),
], ids=["an operator label selectors do not have", "In without values", "Exists with values"])
def test_a_disruption_budget_with_an_invalid_label_selector_is_refused(server: Server, ns: str,
                                                                        expression: dict[str, object],
                                                                        field: str) -> None:
    # A PodDisruptionBudget's selector is a LabelSelector: In/NotIn need values, Exists/DoesNotExist take none,
    # and Gt/Lt (node selector operators) are not among its operators. The API server refuses the object (422,
    # naming the field) rather than storing a budget whose selector would match pods by an unknown rule.
    pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "bad", "namespace": ns},
           "spec": {"minAvailable": 1, "selector": {"matchExpressions": [expression]}}}
    status, body = server.request("POST", f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets", pdb)
    assert status == 422 and body["reason"] == "Invalid", body
    assert field in body["message"], body["message"]
    assert server.get(f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/bad") is None


@pytest.mark.parametrize("how", ["put", "merge-patch"])
def test_an_update_that_makes_a_disruption_budgets_selector_invalid_is_refused(server: Server, ns: str,
                                                                                 how: str) -> None:
    # policy/v1 lets an update change a budget's selector, and the API server validates it again on every
    # update: a valid budget cannot be turned into one whose selector uses Gt. The stored spec is unchanged.
    # (The real server's disruption controller writes the budget's status meanwhile: the PUT sends the
    # resourceVersion it has just read and tries again on a conflict.)
    path = f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets"
    pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "web", "namespace": ns},
           "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}}
    created = server.must("POST", path, pdb)
    bad = {"matchExpressions": [{"key": "app", "operator": "Gt", "values": ["1"]}]}
    if how == "put":
        for _ in range(10):
            current = server.must("GET", f"{path}/web")
            status, body = server.request("PUT", f"{path}/web",
                                          {**current, "spec": {"minAvailable": 1, "selector": bad}})
            if status != 409:
                break
    else:
        status, body = server.request("PATCH", f"{path}/web", {"spec": {"selector": bad}},
                                      content_type="application/merge-patch+json")
    assert status == 422 and body["reason"] == "Invalid", body
    assert "spec.selector.matchExpressions[0].operator" in body["message"], body["message"]
    stored = server.get(f"{path}/web")
    assert stored is not None and stored["spec"] == created["spec"]


def test_a_disruption_budget_cannot_be_replaced_without_a_resource_version(server: Server, ns: str) -> None:
    # Unlike a pod or a node, a budget's registry strategy refuses an unconditional update: a PUT must name
    # the resourceVersion it replaces (422 otherwise), so two writers cannot overwrite each other blindly.
    path = f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets"
    pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "web", "namespace": ns},
           "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}}
    created = server.must("POST", path, pdb)
    meta = {k: v for k, v in created["metadata"].items() if k != "resourceVersion"}
    status, body = server.request("PUT", f"{path}/web", {**created, "metadata": meta, "spec": {**created["spec"],
                                                                                               "minAvailable": 2}})
    assert status == 422 and body["reason"] == "Invalid", body
    assert "metadata.resourceVersion" in body["message"] and "must be specified for an update" in body["message"]
    stored = server.get(f"{path}/web")
    assert stored is not None and stored["spec"]["minAvailable"] == 1
