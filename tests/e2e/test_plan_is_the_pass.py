"""Issue 33 item 5: ``autoscaler plan`` and the provisioner's pass are one code path. A snapshot of a live
cluster (the emulator and moto) plans exactly as the pass decides, registering nodes included."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from autoscaler.adapters.snapshot_file import collect_snapshot
from autoscaler.cli import plan_snapshot
from autoscaler.domain.plan import Plan
from autoscaler.domain.snapshot import parse_snapshot
from autoscaler.handlers.provisioner import provisioner_for
from simulator.local import LocalCluster


def _decisions(plan: Plan) -> dict[str, Any]:
    return {"launches": sorted((ln.node_pool, ln.capacity_type, ln.zones, ln.instance_types, tuple(sorted(ln.pods)))
                               for ln in plan.launches),
            "existing": dict(sorted(plan.existing.items())),
            "unschedulable": sorted((u.pod, u.reason) for u in plan.unschedulable)}


def _registering_node(local: LocalCluster, *, created: float) -> None:
    """A node of the demo NodePool that has just joined: still tainted unregistered and not Ready."""
    region = local.config.region
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(created))
    local.kube.store.create("nodes", {
        "metadata": {"name": "joining", "creationTimestamp": stamp, "labels": {
            "kubernetes.io/hostname": "joining", "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux",
            "karpenter.sh/nodepool": "default", "karpenter.sh/capacity-type": "spot",
            "node.kubernetes.io/instance-type": "m5.xlarge", "topology.kubernetes.io/zone": f"{region}a"}},
        "spec": {"providerID": f"aws:///{region}a/i-0123456789abcdef0",
                 "taints": [{"key": "karpenter.sh/unregistered", "effect": "NoExecute"},
                            {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]},
        "status": {"allocatable": {"cpu": "4", "memory": "15Gi", "pods": "58"},
                   "capacity": {"cpu": "4", "memory": "16Gi", "pods": "58"},
                   "conditions": [{"type": "Ready", "status": "False"}]},
    })


@pytest.mark.parametrize(("age", "joins"), [(30.0, True), (3600.0, False)])
def test_a_snapshot_of_a_live_cluster_plans_as_the_provisioner_pass_does(local: LocalCluster, age: float,
                                                                        joins: bool) -> None:
    # GIVEN a live cluster with a node that is registering (or whose registration timed out long ago) and
    # three pending pods that fit on it
    rt = local.runtime()
    now = rt.clock.now()
    _registering_node(local, created=now - age)
    local.scale("inflate", 3, cpu="1")
    # WHEN the provisioner plans a pass (dry run) and a snapshot taken then is planned offline
    passed = provisioner_for(rt, dry_run=True).run_pass()
    doc = collect_snapshot(list_raw=rt.cluster.list_raw, cloud=rt.cloud, region=rt.config.region,
                           node_pools=rt.config.node_pools, node_classes=rt.config.node_classes, taken_at=now)
    offline = plan_snapshot(parse_snapshot(json.loads(json.dumps(doc, default=str))),
                            registration_timeout=provisioner_for(rt, dry_run=True).settings.registration_timeout)
    # THEN both decide the same: the registering node takes the pods, and a node that never joined does not
    assert _decisions(offline) == _decisions(passed.plan)
    assert bool(passed.plan.existing) is joins and bool(passed.plan.launches) is not joins
