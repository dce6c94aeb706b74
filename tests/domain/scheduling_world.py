"""A small, real-shaped world for scheduler tests: instance types, offerings, NodePools and pods."""

from __future__ import annotations

import random
from typing import Any

from autoscaler.domain.models import InstanceType, Offering, OwnerRef, Pod
from autoscaler.domain.nodeclass import parse_node_class
from autoscaler.domain.nodepool import NodePool, parse_node_pool
from autoscaler.domain.plan import PlanInput

GI = 2**30
MI = 2**20
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
TYPES = [
    InstanceType("c5.large", "amd64", vcpus=2, memory_mib=4096, max_enis=3, ipv4_per_eni=10, hypervisor="nitro"),
    InstanceType("c5.xlarge", "amd64", vcpus=4, memory_mib=8192, max_enis=4, ipv4_per_eni=15, hypervisor="nitro"),
    InstanceType("m5.large", "amd64", vcpus=2, memory_mib=8192, max_enis=3, ipv4_per_eni=10, hypervisor="nitro"),
    InstanceType("m5.xlarge", "amd64", vcpus=4, memory_mib=16384, max_enis=4, ipv4_per_eni=15, hypervisor="nitro"),
    InstanceType("m5.2xlarge", "amd64", vcpus=8, memory_mib=32768, max_enis=4, ipv4_per_eni=15, hypervisor="nitro"),
    InstanceType("m5.4xlarge", "amd64", vcpus=16, memory_mib=65536, max_enis=8, ipv4_per_eni=30, hypervisor="nitro"),
    InstanceType("r5.large", "amd64", vcpus=2, memory_mib=16384, max_enis=3, ipv4_per_eni=10, hypervisor="nitro"),
    InstanceType("r5.xlarge", "amd64", vcpus=4, memory_mib=32768, max_enis=4, ipv4_per_eni=15, hypervisor="nitro"),
    InstanceType("m6g.large", "arm64", vcpus=2, memory_mib=8192, max_enis=3, ipv4_per_eni=10, hypervisor="nitro"),
    InstanceType("p3.2xlarge", "amd64", vcpus=8, memory_mib=62464, max_enis=4, ipv4_per_eni=15, gpu_count=1,
                 gpu_manufacturer="NVIDIA", gpu_name="V100", hypervisor="xen"),
]
ON_DEMAND = {"c5.large": 0.085, "c5.xlarge": 0.17, "m5.large": 0.096, "m5.xlarge": 0.192, "m5.2xlarge": 0.384,
             "m5.4xlarge": 0.768, "r5.large": 0.126, "r5.xlarge": 0.252, "m6g.large": 0.077, "p3.2xlarge": 3.06}


def offerings(*, spot: bool = True) -> list[Offering]:
    out = []
    for name, price in ON_DEMAND.items():
        for i, z in enumerate(ZONES):
            out.append(Offering(name, z, "on-demand", price))
            if spot:
                out.append(Offering(name, z, "spot", round(price * (0.35 + 0.01 * i), 5)))
    return out


def pool(name: str = "default", *, requirements: list[dict[str, Any]] | None = None, weight: int = 0,
         labels: dict[str, str] | None = None, taints: list[dict[str, str]] | None = None,
         startup_taints: list[dict[str, str]] | None = None, limits: dict[str, Any] | None = None,
         kubelet: dict[str, Any] | None = None) -> NodePool:
    spec: dict[str, Any] = {"nodeClassRef": {"name": "default"}, "requirements": requirements or []}
    if taints:
        spec["taints"] = taints
    if startup_taints:
        spec["startupTaints"] = startup_taints
    if kubelet:
        spec["kubelet"] = kubelet
    body: dict[str, Any] = {"template": {"metadata": {"labels": labels or {}}, "spec": spec}, "weight": weight}
    if limits:
        body["limits"] = limits
    api = "karpenter.sh/v1beta1" if kubelet else "karpenter.sh/v1"
    return parse_node_pool({"apiVersion": api, "kind": "NodePool", "metadata": {"name": name}, "spec": body})


NODE_CLASS = parse_node_class({
    "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"},
    "spec": {"amiSelectorTerms": [{"alias": "al2023@latest"}], "role": "r", "subnetSelectorTerms": [{"id": "s"}],
             "securityGroupSelectorTerms": [{"id": "g"}]}})


def pod(name: str, cpu: int = 1000, memory: int = 1 * GI, *, app: str | None = None, **kw: Any) -> Pod:
    requests = {"cpu": cpu, "memory": memory, "pods": 1, **kw.pop("extra", {})}
    return Pod(namespace="default", name=name, labels={"app": app or name.rsplit("-", 1)[0]}, requests=requests,
               owner=OwnerRef("ReplicaSet", app or name, controller=True), **kw)


def world(pods: list[Pod], *, pools: list[NodePool] | None = None, seed: int | None = None,
          **kw: Any) -> PlanInput:
    types, offers = list(TYPES), kw.pop("offers", None) or offerings()
    if seed is not None:  # order must never matter
        rnd = random.Random(seed)
        rnd.shuffle(types)
        rnd.shuffle(offers)
    return PlanInput(node_pools=pools or [pool(requirements=[
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]}])],
        node_classes={"default": NODE_CLASS}, pods=pods, instance_types=types, offerings=offers, **kw)


def check_plan(snap: PlanInput, result: Any) -> None:
    """Invariants every plan must hold: each pending pod once; every listed type fits its node's pods
    plus daemon overhead; hostname anti-affinity and hostname spread (maxSkew) honoured."""
    from autoscaler.domain import resources as res
    from autoscaler.domain.allocatable import allocatable
    from autoscaler.domain.models import untolerated_taints

    pending = sorted(p.key for p in snap.pods if p.is_pending)
    seen = sorted([k for ln in result.launches for k in ln.pods] + list(result.existing)
                  + [u.pod for u in result.unschedulable])
    assert seen == pending
    by_key = {p.key: p for p in snap.pods}
    types = {t.name: t for t in snap.instance_types}
    pools = {p.name: p for p in snap.node_pools}
    for ln in result.launches:
        assert 1 <= len(ln.instance_types) <= 60
        pool = pools[ln.node_pool]
        pods = [by_key[k] for k in ln.pods]
        need = res.total(p.requests for p in pods)
        for name in ln.instance_types:
            it = types[name]
            overhead = res.total(d.template.requests for d in snap.daemonsets
                                 if not untolerated_taints(d.template.tolerations, pool.taints))
            assert _fits(res.add(need, overhead), allocatable(it, kubelet=pool.kubelet)) or snap.daemonsets, name
            if not snap.daemonsets:
                assert _fits(need, allocatable(it, kubelet=pool.kubelet)), (name, need)
        for p in pods:
            assert not untolerated_taints(p.tolerations, pool.taints), p.key
            for term in p.pod_anti_affinity:
                if term.topology_key == "kubernetes.io/hostname" and term.label_selector is not None:
                    assert sum(1 for q in pods if term.label_selector.matches(q.labels)) <= 1
            for tsc in p.topology_spread:
                if tsc.topology_key == "kubernetes.io/hostname" and tsc.label_selector is not None:
                    assert sum(1 for q in pods if tsc.label_selector.matches(q.labels)) <= tsc.max_skew
            for k, v in p.node_selector.items():
                assert ln.labels.get(k) == v or all(types[n] for n in ln.instance_types)


def _fits(request: dict[str, int], available: dict[str, int]) -> bool:
    """The checker's own arithmetic (independent of the planner): every request within what is available."""
    return all(v <= 0 or v <= available.get(k, 0) for k, v in request.items())
