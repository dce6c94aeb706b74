"""The scale benchmarks' pods (``benchmarks/_realistic.py``) held against pods the real control plane makes.

For each controller the generator models (Deployment, StatefulSet, Job), a few of its generated pods become
workload templates: their user-written part (labels, annotations, containers with env, probes, ports, security
context, resources, the config-map volume, affinity and spread) is submitted as a Deployment, a StatefulSet or a
Job, and kube-controller-manager creates the pods. The API server's admission then adds what the generator
imitates (the projected service-account token volume and its mounts, default tolerations, defaulted fields),
the controller its labels, owner reference and finalizers, kube-scheduler the ``PodScheduled=False`` status
of a pod no node fits, and every writer its ``managedFields``. The pods are read back as the product lists
them (a pod list's items) and compared with the generated pod their template came from:

- every top-level, ``metadata``, ``spec``, first-container and ``status`` field a real pod carries, the
  generated one carries too (``compare_with``);
- the generated pod's compact JSON size is within 30 % of the real pod's.

A generator that drifts from real objects (a field kube-apiserver starts returning, server-added parts that
grow or shrink) fails here. Nothing here judges the product; the pods never bind (a node selector no node
matches) and are deleted before the test ends, so other scenarios on this control plane never see them.
"""

from __future__ import annotations

import copy
import json
import random
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from benchmarks._realistic import compare_with, pod_bytes, realistic_pod
from tests import real_kube
from tests.waiting import wait_for

pytestmark = [pytest.mark.real_kube, pytest.mark.e2e]

SIZE_TOLERANCE = 0.30  # the generated pod's size may differ from the real one's by this share of it
TEMPLATES_PER_CONTROLLER = 3
NEVER = {"realistic.test/never": "true"}  # no node carries it: the pods stay pending, as the benchmarks' do
# Labels and annotations a controller puts on its pods itself (a template carrying them is rejected or
# overwritten), and the fields admission or the controller adds: left out of the template.
_CONTROLLER_LABELS = ("pod-template-hash", "controller-revision-hash", "statefulset.kubernetes.io/pod-name",
                      "apps.kubernetes.io/pod-index", "batch.kubernetes.io/controller-uid", "controller-uid",
                      "batch.kubernetes.io/job-name", "job-name")
_CONTROLLER_ANNOTATIONS = ("batch.kubernetes.io/job-completion-index",)
_ADDED_SPEC = ("hostname", "subdomain", "tolerations", "priority", "preemptionPolicy", "serviceAccount", "nodeName")



def _generated(controller: str, seed: int) -> dict[str, Any]:
    """One pod of the generator, with the scheduling shape of the provisioner benchmark's spread class."""
    rng = random.Random(seed)
    app = f"cal-{controller.lower()}-{seed}"
    resources = {"requests": {"cpu": rng.choice(("250m", "500m", "1")), "memory": rng.choice(("256Mi", "1Gi"))}}
    scheduling = {
        "nodeSelector": dict(NEVER),
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                       "whenUnsatisfiable": "DoNotSchedule",
                                       "labelSelector": {"matchLabels": {"app": app}}}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}]}}},
    }
    return realistic_pod(seed, rng, name=f"{app}-0", labels={"app": app}, resources=resources,
                         scheduling=scheduling, controller=controller)


def _template(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The part of ``pod`` a person writes in a workload's pod template."""
    meta, spec = pod["metadata"], copy.deepcopy(dict(pod["spec"]))
    labels = {k: v for k, v in meta["labels"].items() if k not in _CONTROLLER_LABELS}
    annotations = {k: v for k, v in meta["annotations"].items() if k not in _CONTROLLER_ANNOTATIONS}
    token = next(v["name"] for v in spec["volumes"] if "projected" in v)
    spec["volumes"] = [v for v in spec["volumes"] if v["name"] != token]
    for container in spec["containers"]:
        container["volumeMounts"] = [m for m in container["volumeMounts"] if m["name"] != token]
    for key in _ADDED_SPEC:
        spec.pop(key, None)
    return {"metadata": {"labels": labels, "annotations": annotations}, "spec": spec}


def _workload(controller: str, name: str, template: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(collection path under the namespace, object) of a workload running ``template``."""
    selector = {"matchLabels": {"app": template["metadata"]["labels"]["app"]}}
    if controller == "Deployment":
        return "apis/apps/v1/namespaces/{ns}/deployments", {
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": 2, "selector": selector, "template": template}}
    if controller == "StatefulSet":
        # Parallel: an ordered StatefulSet would wait for a pod that never runs before creating the next.
        return "apis/apps/v1/namespaces/{ns}/statefulsets", {
            "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name},
            "spec": {"replicas": 2, "selector": selector, "serviceName": f"{name}-headless",
                     "podManagementPolicy": "Parallel", "template": template}}
    return "apis/batch/v1/namespaces/{ns}/jobs", {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
        "spec": {"parallelism": 2, "completions": 2, "backoffLimit": 0, "template": template}}


@pytest.fixture
def plane() -> real_kube.ControlPlane:
    return real_kube.control_plane()


@pytest.fixture
def namespace(plane: real_kube.ControlPlane) -> Iterator[str]:
    name = f"realistic-{int(time.time() * 1000) % 10**8}"
    plane.must("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    try:
        yield name
    finally:
        # The pods never bind: deleting the namespace removes them at once (the Job controller drops its
        # tracking finalizer). Wait, so no later scenario on this control plane sees them pending.
        plane.request("DELETE", f"/api/v1/namespaces/{name}", {"propagationPolicy": "Background"})
        wait_for(lambda: plane.request("GET", f"/api/v1/namespaces/{name}")[0] == 404, timeout=180,
                 what=f"namespace {name} to be deleted")


def _pending_pods(plane: real_kube.ControlPlane, ns: str, want: int) -> list[dict[str, Any]] | None:
    """The namespace's pods as a list returns them, once ``want`` exist and kube-scheduler has recorded on
    each why it cannot place it (the status the benchmarks' pending pods carry)."""
    items: list[dict[str, Any]] = plane.must("GET", f"/api/v1/namespaces/{ns}/pods?limit=500")["items"]
    done = [p for p in items if any(c.get("type") == "PodScheduled" and c.get("status") == "False"
                                    for c in (p.get("status") or {}).get("conditions") or ())]
    return done if len(done) >= want and len(items) == len(done) else None


def test_generated_pods_carry_the_fields_and_size_of_real_ones(plane: real_kube.ControlPlane, namespace: str) -> None:
    generated: dict[str, dict[str, Any]] = {}  # app label -> the generated pod its workload's template came from
    controllers: dict[str, str] = {}
    for index, controller in enumerate(("Deployment", "StatefulSet", "Job")):
        for seed in range(index * 10, index * 10 + TEMPLATES_PER_CONTROLLER):
            pod = _generated(controller, seed)
            app = pod["metadata"]["labels"]["app"]
            generated[app], controllers[app] = pod, controller
            # The generated pod runs as its own ServiceAccount (``serviceAccountName``): it must exist.
            plane.must("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts",
                       {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": app}})
            path, workload = _workload(controller, app, _template(pod))
            plane.must("POST", "/" + path.format(ns=namespace), workload)
    want = 2 * len(generated)
    real = wait_for(lambda: _pending_pods(plane, namespace, want), timeout=180,
                    what=f"{want} pending pods created by the Deployment, StatefulSet and Job controllers")

    missing: dict[str, list[str]] = {}
    sizes: list[tuple[str, str, int, int]] = []
    for pod in real:
        app = pod["metadata"]["labels"]["app"]
        mine = generated[app]
        gaps = compare_with(mine, pod)
        if gaps:
            missing[controllers[app]] = sorted(set(missing.get(controllers[app], [])) | set(gaps))
        sizes.append((controllers[app], pod["metadata"]["name"], pod_bytes(mine), pod_bytes(pod)))
    assert not missing, (
        "real pods carry fields the generator (benchmarks/_realistic.py) does not produce: "
        f"{json.dumps(missing)}; add them to realistic_pod")
    off = [(c, n, g, r) for c, n, g, r in sizes if abs(g - r) > SIZE_TOLERANCE * r]
    assert not off, (
        f"generated pods outside ±{SIZE_TOLERANCE:.0%} of the real pod's size (controller, pod, generated bytes, "
        f"real bytes): {off}; all: {sizes}")
