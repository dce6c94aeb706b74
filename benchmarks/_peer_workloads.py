"""Workloads for the side-by-side benchmark, exported as cluster snapshots (docs/snapshot.md).

A snapshot is the document ``autoscaler plan --snapshot`` reads and the Karpenter peer
(``benchmarks/peers/karpenter``) reads too: pods, nodes and DaemonSets as ``kubectl get -o json``
objects, NodePools and EC2NodeClasses as manifests, and the catalogue as ``aws ec2 describe-*`` output
with prices (``benchmarks/_catalog.py``: real instance types and on-demand prices, synthesised spot).
Nothing here is tuned to either planner: the Karpenter mix copies Karpenter's own
``makeDiversePods`` and the others are shapes operators run.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from benchmarks._catalog import catalog
from benchmarks._fit import GPU, HOST, ZONE, type_info

Raw = dict[str, Any]
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
# Karpenter's scheduling_benchmark_test.go request menus.
KARPENTER_CPUS = ("100m", "250m", "500m", "1000m", "1500m")
KARPENTER_MEMS = ("100Mi", "256Mi", "512Mi", "1024Mi", "2048Mi", "4096Mi")
LABEL_VALUES = "abcdefg"
GPU_SHAPES = ((1, "4", "16Gi"), (1, "2", "8Gi"), (4, "16", "64Gi"), (8, "32", "128Gi"))
# A DaemonSet-heavy node: CNI, kube-proxy, CSI, logs, metrics, APM agent, security agent.
DAEMONS = (("aws-node", "25m", "64Mi"), ("kube-proxy", "100m", "64Mi"), ("ebs-csi-node", "30m", "120Mi"),
           ("fluent-bit", "200m", "400Mi"), ("node-exporter", "100m", "180Mi"), ("datadog-agent", "300m", "600Mi"),
           ("falco", "250m", "512Mi"))
EXISTING_TYPES = ("m5.2xlarge", "c5.2xlarge", "r5.xlarge")


def pod(name: str, *, cpu: str, memory: str, labels: Mapping[str, str], owner: str = "",
        spread: Sequence[Raw] = (), affinity: Raw | None = None, extra: Mapping[str, str] | None = None,
        tolerations: Sequence[Raw] = (), node: str = "") -> Raw:
    requests = {"cpu": cpu, "memory": memory, **(extra or {})}
    spec: Raw = {"containers": [{"name": "app", "image": "public.ecr.aws/docker/library/busybox",
                                 "resources": {"requests": requests,
                                               **({"limits": dict(extra)} if extra else {})}}]}
    if spread:
        spec["topologySpreadConstraints"] = list(spread)
    if affinity:
        spec["affinity"] = affinity
    if tolerations:
        spec["tolerations"] = list(tolerations)
    if node:
        spec["nodeName"] = node
    meta: Raw = {"name": name, "namespace": "default", "uid": f"uid-{name}", "labels": dict(labels)}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": owner,
                                    "uid": f"uid-rs-{owner}", "controller": True}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec,
            "status": {"phase": "Running" if node else "Pending"}}


def _selector(labels: Mapping[str, str]) -> Raw:
    return {"matchLabels": dict(labels)}


def karpenter_mix(n: int, rng: random.Random) -> list[Raw]:
    """Karpenter's makeDiversePods: a fifth each of plain, zone spread, hostname spread, zone self-affinity
    and hostname anti-affinity (all "app: nginx", so one per node), the remainder plain."""
    def cpu() -> str:
        return rng.choice(KARPENTER_CPUS)

    def mem() -> str:
        return rng.choice(KARPENTER_MEMS)

    def label() -> str:
        return rng.choice(LABEL_VALUES)

    pods: list[Raw] = []
    fifth = n // 5

    def generic(count: int) -> None:
        for _ in range(count):
            pods.append(pod(f"generic-{len(pods)}", cpu=cpu(), memory=mem(), labels={"my-label": label()}))

    generic(fifth)
    for key in (ZONE, HOST):
        for _ in range(fifth):
            labels = {"my-label": label()}
            spread = {"maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule",
                      "labelSelector": _selector({"my-label": label()})}
            pods.append(pod(f"spread-{len(pods)}", cpu=cpu(), memory=mem(), labels=labels, spread=[spread]))
    for _ in range(fifth):
        labels = {"my-affininity": label()}
        aff = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": _selector(labels), "topologyKey": ZONE}]}}
        pods.append(pod(f"affinity-{len(pods)}", cpu=cpu(), memory=mem(), labels=labels, affinity=aff))
    for _ in range(fifth):
        labels = {"app": "nginx"}
        anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": _selector(labels), "topologyKey": HOST}]}}
        pods.append(pod(f"anti-{len(pods)}", cpu=cpu(), memory=mem(), labels=labels, affinity=anti))
    generic(n - len(pods))
    return pods


def plain_mix(n: int, rng: random.Random) -> list[Raw]:
    """Deployments of 20 replicas, one request shape each, from Karpenter's menus."""
    pods = []
    for i in range(n):
        app = f"app-{i // 20}"
        if i % 20 == 0:
            shape = (rng.choice(KARPENTER_CPUS), rng.choice(KARPENTER_MEMS))
        pods.append(pod(f"{app}-{i % 20}", cpu=shape[0], memory=shape[1], labels={"app": app}, owner=app))
    return pods


def spread_mix(n: int, rng: random.Random) -> list[Raw]:
    """Services of 12 replicas, each one of: zone spread; hostname anti-affinity; zone spread and hostname
    anti-affinity together; hostname spread (maxSkew 1). All self-selecting, as operators write them."""
    pods = []
    for i in range(n):
        svc, kind = i // 12, (i // 12) % 4
        app = f"svc-{svc}"
        if i % 12 == 0:
            shape = (rng.choice(KARPENTER_CPUS), rng.choice(KARPENTER_MEMS))
        sel = _selector({"app": app})
        zone_spread = {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule", "labelSelector": sel}
        host_spread = {"maxSkew": 1, "topologyKey": HOST, "whenUnsatisfiable": "DoNotSchedule", "labelSelector": sel}
        anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": sel, "topologyKey": HOST}]}}
        spread = [zone_spread] if kind in (0, 2) else [host_spread] if kind == 3 else []
        pods.append(pod(f"{app}-{i % 12}", cpu=shape[0], memory=shape[1], labels={"app": app}, owner=app,
                        spread=spread, affinity=anti if kind in (1, 2) else None))
    return pods


def gpu_mix(n: int, rng: random.Random) -> list[Raw]:
    """Mostly 1-GPU pods with some 4- and 8-GPU ones (as benchmarks/scheduling.py's GPU mix)."""
    tol = [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}]
    pods = []
    for i in range(n):
        gpus, cpu, mem = GPU_SHAPES[0] if i % 10 < 5 else GPU_SHAPES[1] if i % 10 < 8 else rng.choice(GPU_SHAPES[2:])
        app = f"gpu-{gpus}-{cpu}"
        pods.append(pod(f"{app}-{i}", cpu=cpu, memory=mem, labels={"app": app}, owner=app,
                        extra={GPU: str(gpus)}, tolerations=tol))
    return pods


def node_pool(name: str, *, capacity_types: Sequence[str], families: Sequence[str] = (),
              zones: Sequence[str] = (), taints: Sequence[Raw] = ()) -> Raw:
    reqs: list[Raw] = [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                       {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                       {"key": "karpenter.sh/capacity-type", "operator": "In", "values": list(capacity_types)}]
    if families:
        reqs.append({"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": list(families)})
    else:  # Karpenter's documented default NodePool
        reqs += [{"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]},
                 {"key": "karpenter.k8s.aws/instance-generation", "operator": "Gt", "values": ["2"]}]
    if zones:
        reqs.append({"key": ZONE, "operator": "In", "values": list(zones)})
    spec: Raw = {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                 "requirements": reqs}
    if taints:
        spec["taints"] = list(taints)
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name},
            "spec": {"template": {"spec": spec}}}


NODE_CLASS: Raw = {"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"},
                   "spec": {"amiSelectorTerms": [{"alias": "al2023@latest"}], "role": "KarpenterNodeRole",
                            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "bench"}}],
                            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "bench"}}]}}


def daemonset(name: str, cpu: str, memory: str) -> Raw:
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": "kube-system"},
            "spec": {"selector": {"matchLabels": {"name": name}},
                     "template": {"metadata": {"labels": {"name": name}},
                                  "spec": {"tolerations": [{"operator": "Exists"}],
                                           "containers": [{"name": name, "image": name,
                                                           "resources": {"requests": {"cpu": cpu,
                                                                                      "memory": memory}}}]}}}}


Workload = Callable[[int, random.Random], list[Raw]]
# name -> (pods, NodePool kwargs, DaemonSets)
WORKLOADS: dict[str, tuple[Workload, dict[str, Any], tuple[tuple[str, str, str], ...]]] = {
    "karpenter-mix": (karpenter_mix, {"capacity_types": ["on-demand"]}, DAEMONS[:2]),
    "plain": (plain_mix, {"capacity_types": ["spot", "on-demand"]}, DAEMONS[:2]),
    "daemonset-heavy": (plain_mix, {"capacity_types": ["spot", "on-demand"]}, DAEMONS),
    "spread-anti-affinity": (spread_mix, {"capacity_types": ["spot", "on-demand"], "zones": ZONES}, DAEMONS[:2]),
    "gpu": (gpu_mix, {"capacity_types": ["on-demand"], "families": ["g5", "g6"],
                      "taints": [{"key": GPU, "value": "true", "effect": "NoSchedule"}]}, DAEMONS[:2]),
}


def existing_nodes(count: int, types: Mapping[str, Raw], daemons: Sequence[tuple[str, str, str]]) -> tuple[
        list[Raw], list[Raw]]:
    """``count`` nodes of a managed node group (not a NodePool's), half used by resident pods, with their
    DaemonSet pods bound; allocatable as the fit check computes it."""
    nodes, pods = [], []
    for i in range(count):
        name = f"ip-10-0-{i // 250}-{i % 250}.ec2.internal"
        it = EXISTING_TYPES[i % len(EXISTING_TYPES)]
        info = type_info(types[it])
        zone = ZONES[i % len(ZONES)]
        labels = {**info.labels, ZONE: zone, HOST: name, "karpenter.sh/capacity-type": "on-demand",
                  "eks.amazonaws.com/nodegroup": "existing"}
        alloc = {"cpu": f"{info.allocatable['cpu']}m", "memory": str(info.allocatable["memory"]),
                 "pods": str(info.allocatable["pods"])}
        nodes.append({"apiVersion": "v1", "kind": "Node",
                      "metadata": {"name": name, "labels": labels},
                      "spec": {"providerID": f"aws:///{zone}/i-{i:017x}"},
                      "status": {"capacity": alloc, "allocatable": alloc,
                                 "conditions": [{"type": "Ready", "status": "True"}]}})
        half_cpu = info.allocatable["cpu"] // 4
        half_mem = info.allocatable["memory"] // 4 // 2**20
        for j in range(2):
            pods.append(pod(f"resident-{i}-{j}", cpu=f"{half_cpu}m", memory=f"{half_mem}Mi",
                            labels={"app": "resident"}, owner="resident", node=name))
        for ds, cpu, mem in daemons:
            p = pod(f"{ds}-{i}", cpu=cpu, memory=mem, labels={"name": ds}, node=name)
            p["metadata"]["namespace"] = "kube-system"
            p["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": ds,
                                                 "uid": f"uid-ds-{ds}", "controller": True}]
            pods.append(p)
    return nodes, pods


def snapshot(workload: str, n: int, *, existing: int = 0, seed: int = 42) -> Raw:
    """The exporter: one workload at ``n`` pending pods (plus ``existing`` nodes) as a snapshot document."""
    make, pool_kwargs, daemons = WORKLOADS[workload]
    cat = catalog("us-east-1")
    pods = make(n, random.Random(seed))
    by_name = {t["InstanceType"]: t for t in cat["instanceTypes"]}
    nodes, bound = existing_nodes(existing, by_name, daemons)
    return {
        "region": "us-east-1",
        "nodePools": [node_pool("default", **pool_kwargs)],
        "nodeClasses": [NODE_CLASS],
        "pods": bound + pods,
        "nodes": nodes,
        "daemonSets": [daemonset(*d) for d in daemons],
        "instanceTypes": cat["instanceTypes"],
        "offerings": cat["offerings"],
        "prices": cat["prices"],
    }


def zone_affinity_pair() -> Raw:
    """The smallest input on which Karpenter's scheduler splits a zone self-affinity group (docs/scheduling.md):
    two replicas that must share a zone (required pod affinity, topology key zone, on their own label) and
    must not share a node (required anti-affinity, topology key hostname, on the same label)."""
    sel = _selector({"app": "pair"})
    both = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": sel, "topologyKey": ZONE}]},
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": sel, "topologyKey": HOST}]}}
    doc = snapshot("karpenter-mix", 0)
    doc["pods"] = [pod(f"pair-{i}", cpu="1", memory="1Gi", labels={"app": "pair"}, owner="pair", affinity=both)
                   for i in range(2)]
    return doc
