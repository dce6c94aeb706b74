"""Pods as kube-apiserver returns them for Deployment, StatefulSet and Job pods, for every scale benchmark.

A benchmark decides a pod's *scheduling* shape (its requests, labels, spread and affinity terms: the
five-class Karpenter mix of ``provisioner_pass.py``, or the watcher's plain pods) and hands it to
``realistic_pod``, which wraps it in everything else a real API server returns and the autoscaler does
not read: ``metadata.managedFields`` (one ``Update`` entry by the controller that created the pod, with
its ``fieldsV1`` mirroring the spec's field set, and one by kube-scheduler for the status condition),
``generateName``/``uid``/``resourceVersion``/``creationTimestamp``, the owner reference as the controller
writes it (``controller: true``, ``blockOwnerDeletion: true``), the controller's labels (Deployment:
``pod-template-hash``; StatefulSet: ``controller-revision-hash``, ``statefulset.kubernetes.io/pod-name``,
``apps.kubernetes.io/pod-index``; Job: ``batch.kubernetes.io/controller-uid``, ``job-name`` and the
``batch.kubernetes.io/job-tracking`` finalizer), a dozen environment variables (literal values,
``valueFrom`` field and secret references), ports, volume mounts, liveness and readiness probes, a
security context, the projected service-account volume (``kube-api-access-*``: token, ``kube-root-ca.crt``,
the namespace through the downward API) and a config-map volume, the admission-defaulted fields
(``dnsPolicy``, ``schedulerName``, ``enableServiceLinks``, ``preemptionPolicy``, the two default
``NoExecute`` tolerations for ``not-ready``/``unreachable`` with ``tolerationSeconds: 300``), and the
status kube-scheduler leaves on a pending pod (``PodScheduled=False``, reason ``Unschedulable`` with its
message and ``observedGeneration``, ``qosClass``), ``metadata.generation``. One pod in seven gets a sidecar
container; env counts (1-12, mostly a few), probes (none on Job pods and on a third of the others), security
contexts and annotation sizes vary, so the five-class benchmark mix spreads over ~4.5-9 KB of compact JSON,
median ~6 KB: heavier than the issue's real Deployment pods (3.3-3.8 KB, a leaner spec), so the estimates
err slow. ``size_summary`` reports the distribution, and every benchmark prints it among its assumptions.

Calibration against a real kube-apiserver (v1.37, ``tests/e2e/real_kube/test_realistic_pods_real.py``, run
with the real-control-plane tests): generated pods of each controller become workload templates (their
user-written part: labels, annotations, containers with env, probes, ports, resources, the config-map
volume, affinity and spread), a Deployment, a StatefulSet and a Job are created from them, and the pods
kube-controller-manager creates (admission adds the token volume, default tolerations and defaults;
kube-scheduler the unschedulable status) are read back as a pod list returns them. The test fails when a
real pod carries a top-level, metadata, spec, container or status field the generated one lacks
(``compare_with``), or when the generated pod's compact size is off the real one's by more than 30 %. At
calibration the generated pods were within 2 % of the real ones (the ``fieldsV1`` layout of
``managedFields`` follows what the server recorded: full depth, lists keyed as ``_LIST_KEYS`` says).
"""

from __future__ import annotations

import json
import random
import statistics
from collections.abc import Iterable, Mapping
from typing import Any

CONTROLLERS = ("Deployment", "StatefulSet", "Job")
_TIME = "2026-11-26T05:00:00Z"
_ENV_NAMES = ("LOG_LEVEL", "PORT", "METRICS_PORT", "DATABASE_HOST", "DATABASE_PORT", "DATABASE_NAME",
              "CACHE_URL", "FEATURE_FLAGS", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SERVICE_NAME", "AWS_REGION",
              "JAVA_OPTS", "GOMAXPROCS", "TZ", "UPSTREAM_TIMEOUT_MS", "QUEUE_URL")
_IMAGES = ("123456789012.dkr.ecr.us-east-1.amazonaws.com/shop/checkout",
           "123456789012.dkr.ecr.us-east-1.amazonaws.com/platform/ingest-worker",
           "public.ecr.aws/docker/library/nginx", "ghcr.io/example-org/payments-api")


def _hex(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("0123456789abcdef") for _ in range(n))


def _uid(rng: random.Random) -> str:
    return f"{_hex(rng, 8)}-{_hex(rng, 4)}-{_hex(rng, 4)}-{_hex(rng, 4)}-{_hex(rng, 12)}"


def _suffix(rng: random.Random, n: int = 5) -> str:
    return "".join(rng.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(n))


# How server-side apply keys the items of the pod's associative lists in ``fieldsV1`` (``k:{...}``), and the
# fields it records whole (atomic: ``{}``), as kube-apiserver does for a pod (Kubernetes' openapi
# ``x-kubernetes-list-map-keys`` and ``structType=atomic`` markers).
_LIST_KEYS = {"containers": ("name",), "initContainers": ("name",), "env": ("name",), "volumes": ("name",),
              "ports": ("containerPort", "protocol"), "volumeMounts": ("mountPath",),
              "topologySpreadConstraints": ("topologyKey", "whenUnsatisfiable"), "ownerReferences": ("uid",)}
_ATOMIC = frozenset({"nodeSelector", "requiredDuringSchedulingIgnoredDuringExecution", "secretKeyRef", "fieldRef",
                     "configMapKeyRef", "labelSelector", "tolerations", "drop", "add", "command", "args",
                     "preferredDuringSchedulingIgnoredDuringExecution"})
_UNTRACKED = frozenset({"containers"})  # required lists: no ``.`` entry of their own


def _fields_v1(value: Any, name: str = "") -> Any:
    """Server-side apply's field set of a JSON value, as kube-apiserver records it in ``managedFields``:
    ``f:<field>`` per map key with ``.`` for the map itself, ``k:{...}`` per item of an associative list (by
    its keys: ``_LIST_KEYS``), ``v:...`` per member of a set (finalizers), ``{}`` for leaves and atomic
    fields (``_ATOMIC``). Calibrated against pods read back from kube-apiserver v1.37
    (tests/e2e/real_kube/test_realistic_pods_real.py)."""
    if name in _ATOMIC:
        return {}
    if isinstance(value, Mapping):
        return {".": {}, **{f"f:{k}": _fields_v1(v, k) for k, v in value.items()}}
    if isinstance(value, list):
        out: dict[str, Any] = {} if name in _UNTRACKED else {".": {}}
        keys = _LIST_KEYS.get(name)
        for item in value:
            if keys and isinstance(item, Mapping):
                key = json.dumps({k: item[k] for k in keys if k in item}, separators=(",", ":"))
                out[f"k:{key}"] = {} if name == "ownerReferences" else _fields_v1(item)
            elif not isinstance(item, Mapping | list):
                out[f"v:{json.dumps(item)}"] = {}
        return out
    return {}


def _managed(fields: Mapping[str, Any]) -> dict[str, Any]:
    """``fieldsV1`` of a root object's fields (the root and ``metadata``/``spec`` have no ``.``)."""
    return {f"f:{k}": {key: v for key, v in _fields_v1(value, k).items() if key != "."} if k in ("metadata", "spec")
            else _fields_v1(value, k) for k, value in fields.items()}


def _container(name: str, image: str, resources: Mapping[str, Any], env: int, rng: random.Random,
               *, ports: bool = True) -> dict[str, Any]:
    values: list[dict[str, Any]] = []
    for k in _ENV_NAMES[:env]:
        if k == "DATABASE_HOST":
            values.append({"name": k, "valueFrom": {"secretKeyRef": {"name": "db-credentials", "key": "host"}}})
        elif k == "OTEL_SERVICE_NAME":
            values.append({"name": k, "valueFrom": {"fieldRef": {"apiVersion": "v1",
                                                                 "fieldPath": "metadata.labels['app']"}}})
        else:
            values.append({"name": k, "value": _hex(rng, rng.randint(2, 20))})
    out: dict[str, Any] = {
        "name": name, "image": f"{image}:v{rng.randint(1, 9)}.{rng.randint(0, 40)}.{rng.randint(0, 9)}",
        "env": values, "resources": dict(resources),
        "volumeMounts": [{"name": "config", "mountPath": "/etc/app", "readOnly": True},
                         {"name": f"kube-api-access-{_suffix(rng)}", "readOnly": True,
                          "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
        "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
    }
    if rng.random() < 0.4:
        out["securityContext"] = {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                  "runAsNonRoot": True, "capabilities": {"drop": ["ALL"]}}
    if ports:
        out["ports"] = [{"name": "http", "containerPort": 8080, "protocol": "TCP"},
                        {"name": "metrics", "containerPort": 9090, "protocol": "TCP"}]
        probe = {"httpGet": {"path": "/healthz", "port": "http", "scheme": "HTTP"}, "timeoutSeconds": 1,
                 "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3}
        out["livenessProbe"] = {**probe, "initialDelaySeconds": 10}
        out["readinessProbe"] = {**probe, "httpGet": {**probe["httpGet"], "path": "/ready"}}
    return out


def realistic_pod(i: int, rng: random.Random, *, name: str, namespace: str = "default",
                  labels: Mapping[str, str], resources: Mapping[str, Any],
                  scheduling: Mapping[str, Any] | None = None, controller: str | None = None,
                  node_name: str | None = None) -> dict[str, Any]:
    """Pending pod ``i`` as kube-apiserver returns it: the scheduling shape given (``labels``, the first
    container's ``resources``, ``scheduling`` merged into the spec: affinity, topologySpreadConstraints,
    nodeSelector, tolerations added to the defaults) wrapped in a real pod's other fields. ``controller``
    (Deployment, StatefulSet or Job; by default one of them in proportion 3:1:1) sets the owner and its
    labels. ``name`` is the pod's name (the benchmarks' names stay stable across the mix). With
    ``node_name`` the pod is bound there and running, with the kubelet's status (IPs, container states)."""
    controller = controller or ("Deployment", "Deployment", "Deployment", "StatefulSet", "Job")[i % 5]
    app = labels.get("app", "app")
    meta_labels: dict[str, str] = {**labels, "app.kubernetes.io/name": app,
                                   "app.kubernetes.io/part-of": "shop", "app.kubernetes.io/version": "1.42.0"}
    annotations: dict[str, str] = {"prometheus.io/scrape": "true", "prometheus.io/port": "9090"}
    spec_extra: dict[str, Any] = {"restartPolicy": "Always"}
    finalizers: list[str] = []
    owner_uid = _uid(random.Random(app + controller))  # one owner per app, as a real controller's
    if controller == "Deployment":
        rs_hash = _suffix(random.Random(app), 10)
        meta_labels["pod-template-hash"] = rs_hash
        owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{app}-{rs_hash}"}
        annotations["kubectl.kubernetes.io/restartedAt"] = "2026-11-20T09:14:03Z"
    elif controller == "StatefulSet":
        meta_labels.update({"controller-revision-hash": f"{app}-{_suffix(random.Random(app), 10)}",
                            "statefulset.kubernetes.io/pod-name": name, "apps.kubernetes.io/pod-index": str(i)})
        owner = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": app}
        spec_extra.update({"hostname": name, "subdomain": f"{app}-headless"})
    else:
        meta_labels.update({"batch.kubernetes.io/controller-uid": owner_uid, "controller-uid": owner_uid,
                            "batch.kubernetes.io/job-name": app, "job-name": app})
        owner = {"apiVersion": "batch/v1", "kind": "Job", "name": app}
        finalizers = ["batch.kubernetes.io/job-tracking"]
        spec_extra["restartPolicy"] = "Never"
    if rng.random() < 0.3:  # some teams annotate heavily (tracing, config checksums, owners)
        annotations.update({"checksum/config": _hex(rng, 64), "team.example.com/owner": "payments-oncall",
                            "sidecar.opentelemetry.io/inject": "false"})
    token_volume = f"kube-api-access-{_suffix(rng)}"
    # Jobs rarely serve: no ports, no probes; a third of the services run without probes either.
    serving = controller != "Job" and rng.random() < 0.67
    env = round(rng.triangular(1, 12, 3))
    containers = [_container("app", rng.choice(_IMAGES), resources, env, rng, ports=serving)]
    if rng.random() < 0.15:
        containers.append(_container("log-router", "public.ecr.aws/aws-observability/aws-for-fluent-bit",
                                     {"requests": {"cpu": "50m", "memory": "64Mi"},
                                      "limits": {"memory": "128Mi"}}, rng.randint(1, 4), rng, ports=False))
    for c in containers:
        c["volumeMounts"][1]["name"] = token_volume
    defaults = [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                 "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
                 "tolerationSeconds": 300}]
    scheduling = dict(scheduling or {})
    tolerations = [*scheduling.pop("tolerations", ()), *defaults]
    spec: dict[str, Any] = {
        "volumes": [
            {"name": "config", "configMap": {"name": f"{app}-config", "defaultMode": 420}},
            {"name": token_volume, "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1",
                                                                              "fieldPath": "metadata.namespace"}}]}},
            ]}},
        ],
        "containers": containers,
        **spec_extra,
        "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
        "serviceAccountName": app, "serviceAccount": app, "securityContext": {"fsGroup": 65534},
        "schedulerName": "default-scheduler", "tolerations": tolerations, "priority": 0,
        "enableServiceLinks": True, "preemptionPolicy": "PreemptLowerPriority",
        **scheduling,
    }
    uid = _uid(rng)
    status = {"phase": "Pending", "conditions": [{
        "type": "PodScheduled", "observedGeneration": 1, "status": "False", "lastProbeTime": None,
        "lastTransitionTime": _TIME, "reason": "Unschedulable",
        "message": "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available: "
                   "3 No preemption victims found for incoming pod."}],
        "qosClass": "Burstable"}
    created_by = {"Deployment": "kube-controller-manager", "StatefulSet": "kube-controller-manager",
                  "Job": "kube-controller-manager"}[controller]
    metadata: dict[str, Any] = {
        "name": name, "generateName": f"{app}-", "namespace": namespace, "uid": uid,
        "resourceVersion": str(100000 + i), "generation": 1, "creationTimestamp": _TIME, "labels": meta_labels,
        "annotations": annotations,
        "ownerReferences": [{**owner, "uid": owner_uid, "controller": True, "blockOwnerDeletion": True}],
    }
    if finalizers:
        metadata["finalizers"] = finalizers
    # What the controller wrote when it created the pod: the template's fields, not those admission added (the
    # service-account token volume and its mounts, default tolerations, priority).
    written = {k: v for k, v in spec.items() if k not in ("tolerations", "priority", "preemptionPolicy")}
    written["volumes"] = [v for v in spec["volumes"] if v["name"] != token_volume]
    written["containers"] = [{**c, "volumeMounts": [m for m in c["volumeMounts"] if m["name"] != token_volume]}
                             for c in containers]
    metadata["managedFields"] = [
        {"manager": created_by, "operation": "Update", "apiVersion": "v1", "time": _TIME, "fieldsType": "FieldsV1",
         "fieldsV1": _managed({"metadata": {k: v for k, v in metadata.items()
                                            if k in ("generateName", "labels", "annotations", "ownerReferences",
                                                     "finalizers")},
                               "spec": written})},
        {"manager": "kube-scheduler", "operation": "Update", "apiVersion": "v1", "time": _TIME,
         "fieldsType": "FieldsV1", "subresource": "status",
         "fieldsV1": {"f:status": {"f:conditions": {".": {}, 'k:{"type":"PodScheduled"}': {
             ".": {}, "f:lastProbeTime": {}, "f:lastTransitionTime": {}, "f:message": {}, "f:observedGeneration": {},
             "f:reason": {}, "f:status": {}, "f:type": {}}}}}},
    ]
    if node_name:
        spec["nodeName"] = node_name
        status = {"phase": "Running", "hostIP": "10.0.12.34", "podIP": f"10.0.{i % 250}.{i % 200 + 20}",
                  "startTime": _TIME, "qosClass": "Burstable",
                  "conditions": [{"type": t, "observedGeneration": 1, "status": "True", "lastProbeTime": None,
                                  "lastTransitionTime": _TIME}
                                 for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady",
                                           "PodScheduled")],
                  "containerStatuses": [{"name": c["name"], "ready": True, "restartCount": 0, "started": True,
                                         "image": c["image"], "imageID": f"{c['image']}@sha256:{_hex(rng, 64)}",
                                         "containerID": f"containerd://{_hex(rng, 64)}",
                                         "state": {"running": {"startedAt": _TIME}}} for c in containers]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": status}


def realistic_node(node: Mapping[str, Any], rng: random.Random) -> dict[str, Any]:
    """A node (its name, labels, taints, providerID, allocatable and capacity as given) with what a kubelet
    and the cloud controller add: addresses, node info, the images it pulled (the bulk of a real node:
    ~30 images with their digests), daemon endpoints, the four pressure conditions, managedFields."""
    meta, spec, status = dict(node["metadata"]), dict(node.get("spec") or {}), dict(node.get("status") or {})
    name = meta["name"]
    meta.update({"uid": _uid(rng), "resourceVersion": str(rng.randint(1000, 10**6)), "creationTimestamp": _TIME,
                 "annotations": {"alpha.kubernetes.io/provided-node-ip": "10.0.12.34",
                                 "node.alpha.kubernetes.io/ttl": "0",
                                 "volumes.kubernetes.io/controller-managed-attach-detach": "true"},
                 "managedFields": [{"manager": m, "operation": "Update", "apiVersion": "v1", "time": _TIME,
                                    "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {
                                        "f:conditions": {}, "f:images": {}, "f:nodeInfo": {}, "f:addresses": {}}}}
                                   for m in ("kubelet", "kube-controller-manager", "aws-cloud-controller-manager")]})
    conditions = [{"type": t, "status": "False", "lastHeartbeatTime": _TIME, "lastTransitionTime": _TIME,
                   "reason": f"KubeletHas{r}", "message": f"kubelet has {m}"}
                  for t, r, m in (("MemoryPressure", "SufficientMemory", "sufficient memory available"),
                                  ("DiskPressure", "NoDiskPressure", "no disk pressure"),
                                  ("PIDPressure", "SufficientPID", "sufficient PID available"))]
    conditions += list(status.get("conditions") or ())
    images = [{"names": [f"{_IMAGES[j % len(_IMAGES)]}@sha256:{_hex(rng, 64)}",
                         f"{_IMAGES[j % len(_IMAGES)]}:v{j}.{rng.randint(0, 40)}.0"],
               "sizeBytes": rng.randint(10**7, 10**9)} for j in range(30)]
    status.update({
        "conditions": conditions, "images": images,
        "addresses": [{"type": "InternalIP", "address": "10.0.12.34"}, {"type": "InternalDNS", "address": name},
                      {"type": "Hostname", "address": name}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {"machineID": _hex(rng, 32), "systemUUID": _uid(rng), "bootID": _uid(rng),
                     "kernelVersion": "6.1.112-124.190.amzn2023.aarch64", "osImage": "Amazon Linux 2023.6.20241111",
                     "containerRuntimeVersion": "containerd://1.7.23", "kubeletVersion": "v1.31.2-eks-94953ac",
                     "kubeProxyVersion": "v1.31.2-eks-94953ac", "operatingSystem": "linux",
                     "architecture": "amd64"},
    })
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta, "spec": spec, "status": status}


def pod_bytes(pod: Mapping[str, Any]) -> int:
    """The pod's size as compact JSON (what a list page carries per item)."""
    return len(json.dumps(pod, separators=(",", ":")))


def size_summary(pods: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Median, 5th and 95th percentile, min and max of the pods' compact JSON sizes, in bytes."""
    sizes = sorted(pod_bytes(p) for p in pods)
    if not sizes:
        return {"pods": 0}
    pick = lambda q: sizes[min(len(sizes) - 1, int(q * len(sizes)))]  # noqa: E731
    return {"pods": len(sizes), "medianBytes": int(statistics.median(sizes)), "p5Bytes": pick(0.05),
            "p95Bytes": pick(0.95), "minBytes": sizes[0], "maxBytes": sizes[-1]}


def compare_with(generated: Mapping[str, Any], real: Mapping[str, Any]) -> list[str]:
    """The top-level, metadata, spec, container and status field names that a pod read back from a real
    kube-apiserver has and a generated one lacks (empty: the generator covers the real pod)."""
    def keys(obj: Any, *path: str) -> set[str]:
        for p in path:
            obj = (obj or {}).get(p) if not p.isdigit() else ((obj or [None])[int(p)] if obj else None)
        return set(obj or ()) if isinstance(obj, Mapping) else set()

    missing = []
    for path in ((), ("metadata",), ("spec",), ("spec", "containers", "0"), ("status",)):
        for field in sorted(keys(real, *path) - keys(generated, *path)):
            missing.append(".".join((*path, field)))
    return missing
