"""The Cluster Autoscaler baseline's set-up and decisions: node groups, expander, backoff, scale-down blockers."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from simulator.sim.baseline import BaselineSettings, Group, backoff_seconds, blocker, expand, groups_for

ZONES = ("us-east-1a", "us-east-1b")
TYPES = {n: SimpleNamespace(vcpus=v, memory_mib=m) for n, v, m in (
    ("m5.large", 2, 8192), ("m5.xlarge", 4, 16384), ("m5a.xlarge", 4, 16384), ("m5.2xlarge", 8, 32768),
    ("c5.xlarge", 4, 8192), ("r5.xlarge", 4, 32768), ("t3.xlarge", 4, 16384))}
PRICES = {"m5.large": 0.096, "m5.xlarge": 0.192, "m5a.xlarge": 0.172, "m5.2xlarge": 0.384, "c5.xlarge": 0.17,
          "r5.xlarge": 0.252, "t3.xlarge": 0.1664}


def _req(key: str, op: str, *values: str) -> SimpleNamespace:
    return SimpleNamespace(key=key, operator=op, values=values)


def _pool(name: str, *reqs: SimpleNamespace, weight: int = 0, taints: tuple[Any, ...] = ()) -> SimpleNamespace:
    return SimpleNamespace(name=name, requirements=reqs, weight=weight, labels={"team": name}, taints=taints)


def _labels(itype: str, zone: str, ct: str) -> dict[str, str]:
    family = itype.split(".", maxsplit=1)[0]
    return {"node.kubernetes.io/instance-type": itype, "karpenter.k8s.aws/instance-family": family,
            "karpenter.k8s.aws/instance-category": family[0], "topology.kubernetes.io/zone": zone,
            "karpenter.sh/capacity-type": ct, "kubernetes.io/arch": "amd64"}


def _groups(*pools: SimpleNamespace, **settings: Any) -> list[Group]:
    return groups_for(pools, TYPES, ZONES, prices=PRICES, labels_of=_labels,
                      settings=BaselineSettings(**settings))


def test_one_group_per_zone_family_size_and_allowed_capacity_type() -> None:
    pool = _pool("default", _req("karpenter.k8s.aws/instance-family", "In", "m5", "c5"),
                 _req("karpenter.sh/capacity-type", "In", "spot", "on-demand"))
    groups = _groups(pool, sizes=("xlarge",))
    assert sorted(g.name for g in groups) == sorted(
        f"default-{f}-xlarge-{ct}-{z}" for f in ("c5", "m5") for ct in ("spot", "on-demand") for z in ZONES)
    spot = next(g for g in groups if g.capacity_type == "spot")
    on_demand = next(g for g in groups if g.capacity_type == "on-demand")
    assert spot.priority > on_demand.priority  # the operator's priority ConfigMap: spot first
    assert spot.labels == {"team": "default"}


def test_the_mixed_instances_policy_lists_same_shape_types_the_nodepool_allows() -> None:
    pool = _pool("default", _req("karpenter.k8s.aws/instance-category", "In", "m"),
                 _req("karpenter.sh/capacity-type", "In", "on-demand"))
    m5 = next(g for g in _groups(pool, sizes=("xlarge",)) if g.name.startswith("default-m5-xlarge"))
    assert m5.instance_types == ("m5.xlarge", "m5a.xlarge")  # same 4 vCPU / 16 GiB; t3 is another category
    only_a = _pool("a", _req("karpenter.sh/capacity-type", "In", "on-demand"),
                   _req("topology.kubernetes.io/zone", "In", "us-east-1b"),
                   _req("karpenter.k8s.aws/instance-family", "In", "r5"))
    assert [g.zone for g in _groups(only_a, sizes=("xlarge",))] == ["us-east-1b"]


def test_heavier_nodepools_get_higher_priority_and_carry_their_taints() -> None:
    taint = SimpleNamespace(key="fruit", value="banana", effect="NoSchedule")
    banana = _pool("banana", _req("karpenter.k8s.aws/instance-family", "In", "m5"), weight=50, taints=(taint,))
    default = _pool("default", _req("karpenter.k8s.aws/instance-family", "In", "m5"))
    groups = _groups(banana, default, sizes=("large",))
    top = max(groups, key=lambda g: g.priority)
    assert top.node_pool == "banana" and top.taints == [{"key": "fruit", "value": "banana", "effect": "NoSchedule"}]


def _group(name: str, priority: int) -> Group:
    return Group(name=name, node_pool="p", zone=ZONES[0], capacity_type="spot", instance_types=("m5.large",),
                 priority=priority)


def test_priority_expander_then_least_waste() -> None:
    options = [(_group("spot-big", 15), 1, 5, (0.6, 0.5)), (_group("spot-small", 15), 2, 5, (0.2, 0.7)),
               (_group("od-tight", 10), 2, 5, (0.0, 0.0))]
    assert expand(options, "priority")[0].name == "spot-small"  # least idle CPU among the spot groups
    assert expand(options, "least-waste")[0].name == "od-tight"


def test_backoff_doubles_per_failure_up_to_the_maximum() -> None:
    settings = BaselineSettings()
    assert [backoff_seconds(n, settings) for n in (1, 2, 3, 4, 5)] == [300, 600, 1200, 1800, 1800]


def _pod(namespace: str = "default", *, owner: str = "ReplicaSet", volumes: tuple[dict[str, Any], ...] = (),
         annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "namespace": namespace, "labels": {"app": "x"},
                            "annotations": annotations or {}}
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": "x", "controller": True}]
    return {"metadata": meta, "spec": {"containers": [], "volumes": list(volumes)}}


def test_scale_down_blockers_are_ca_s_defaults() -> None:
    s = BaselineSettings()
    pdb = {"metadata": {"namespace": "kube-system"}, "spec": {"selector": {"matchLabels": {"app": "x"}}}}
    assert blocker(_pod(), [], s) == ""
    assert blocker(_pod("kube-system"), [], s) == "kube-system pod without a PodDisruptionBudget"
    assert blocker(_pod("kube-system"), [pdb], s) == ""
    assert blocker(_pod(volumes=({"name": "tmp", "emptyDir": {}},)), [], s) == "local storage"
    assert blocker(_pod(owner=""), [], s) == "not backed by a controller"
    assert blocker(_pod(annotations={"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}), [], s)
    safe = _pod("kube-system", volumes=({"name": "tmp", "emptyDir": {}},),
                annotations={"cluster-autoscaler.kubernetes.io/safe-to-evict": "true"})
    assert blocker(safe, [], s) == ""
    relaxed = BaselineSettings(skip_nodes_with_system_pods=False, skip_nodes_with_local_storage=False)
    assert blocker(_pod("kube-system", volumes=({"name": "tmp", "emptyDir": {}},)), [], relaxed) == ""
