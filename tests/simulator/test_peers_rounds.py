"""Karpenter's later provisioner rounds in the side-by-side benchmark (benchmarks/peers.py): what each round
reads after the one before (the harness's own bookkeeping; the peer binary is not run here)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks import peers
from benchmarks._fit import GPU, HOST, ZONE
from benchmarks._peer_workloads import snapshot

ALLOC = {"cpu": "3920m", "memory": "14162Mi", "pods": "58", GPU: "1"}


def _claim(*pods: str, it: str = "g5.xlarge", zone: str = "us-east-1b") -> dict[str, Any]:
    return {"nodePool": "default", "instanceType": it, "zone": zone, "capacityType": "on-demand",
            "pricePerHour": 1.006, "instanceTypeOptions": 3, "allowedZones": [zone], "pods": list(pods),
            "allocatable": ALLOC}


def _out(claims: list[dict[str, Any]], existing: dict[str, list[str]], *, pending: int, deferred: int,
         unschedulable: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"nodeClaims": claims, "existingNodePods": existing, "pendingPods": pending, "deferredPods": deferred,
            "solveSeconds": 60.0, "solveCpuSeconds": 55.0, "unschedulable": [{"pod": p, "error": "x"}
                                                                             for p in unschedulable],
            "totalPerHour": sum(c["pricePerHour"] for c in claims if c["instanceType"])}


@pytest.fixture
def snap() -> dict[str, Any]:
    return snapshot("gpu", 6, existing=3)


def _pending(doc: dict[str, Any]) -> list[str]:
    return [p["metadata"]["name"] for p in doc["pods"] if not p["spec"].get("nodeName")]


def test_a_rounds_nodeclaims_become_nodes_of_their_pool_with_their_pods_bound(snap: dict[str, Any]) -> None:
    before = copy.deepcopy(snap)
    pending = _pending(snap)
    host = snap["nodes"][0]["metadata"]["name"]
    unpriced = {**_claim(f"default/{pending[3]}"), "instanceType": "", "zone": ""}
    out = _out([_claim(f"default/{pending[0]}", f"default/{pending[1]}"), unpriced],
               {host: [f"default/{pending[2]}"]}, pending=6, deferred=2)
    types = {t["InstanceType"]: t for t in snap["instanceTypes"]}
    after, claims = peers.next_round(snap, out, 1, types)
    assert snap == before  # the earlier round's snapshot is left as it was
    node = after["nodes"][-1]
    name = node["metadata"]["name"]
    assert list(claims) == [name] and len(after["nodes"]) == len(snap["nodes"]) + 1  # the unpriced one is not launched
    labels = node["metadata"]["labels"]
    assert labels["node.kubernetes.io/instance-type"] == "g5.xlarge" and labels[ZONE] == "us-east-1b"
    assert labels[HOST] == name and labels["karpenter.sh/nodepool"] == "default"
    assert labels["karpenter.sh/capacity-type"] == "on-demand" and labels["karpenter.sh/initialized"] == "true"
    assert node["spec"]["taints"] == [{"key": GPU, "value": "true", "effect": "NoSchedule"}]  # the pool's template
    assert node["status"]["allocatable"] == ALLOC  # what Karpenter expects of the type, not the fit check's
    where = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in after["pods"]}
    assert where[pending[0]] == where[pending[1]] == name and where[pending[2]] == host
    assert _pending(after) == pending[3:]  # the unpriced claim's pod and the deferred ones stay pending


def test_rounds_add_later_placements_to_the_earlier_nodeclaims_and_stop_when_none_is_deferred(
        snap: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pending = _pending(snap)
    host = snap["nodes"][1]["metadata"]["name"]
    first = _out([_claim(f"default/{pending[0]}")], {host: [f"default/{pending[1]}"]}, pending=6, deferred=4)
    later = [_out([_claim(f"default/{pending[3]}", zone="us-east-1c")],
                  {"karpenter-round1-0.ec2.internal": [f"default/{pending[2]}"]}, pending=4, deferred=2),
             _out([], {host: [f"default/{pending[4]}"]}, pending=2, deferred=0,
                  unschedulable=(f"default/{pending[5]}",))]
    read: list[dict[str, Any]] = []

    def peer(binary: Path, path: Path, timeout: float, solve_bound: float = 0.0) -> dict[str, Any]:
        read.append(json.loads(path.read_text()))
        assert solve_bound == 60.0 and timeout > 0
        return later[len(read) - 1]

    monkeypatch.setattr(peers, "run_karpenter", peer)
    result = peers.run_karpenter_rounds(Path("peer"), snap, first, tmp_path / "s.json", timeout=600,
                                        solve_bound=60.0, max_rounds=10)
    assert len(read) == 2 and len(result["rounds"]) == 3 and result["stopped"] is None
    # Round two read round one's NodeClaim as a node, round three round two's too.
    assert [n["metadata"]["name"] for n in read[0]["nodes"][3:]] == ["karpenter-round1-0.ec2.internal"]
    assert len(read[1]["nodes"]) == 5 and _pending(read[1]) == pending[4:]
    pods = {tuple(c["pods"]) for c in result["nodeClaims"]}
    assert pods == {(f"default/{pending[0]}", f"default/{pending[2]}"), (f"default/{pending[3]}",)}
    assert result["existingNodePods"] == {host: [f"default/{pending[1]}", f"default/{pending[4]}"]}
    assert result["deferredPods"] == 0 and [u["pod"] for u in result["unschedulable"]] == [f"default/{pending[5]}"]
    assert [r["placed"] for r in result["rounds"]] == [2, 2, 1]
    assert [r["onEarlierNodes"] for r in result["rounds"]] == [0, 1, 0]  # the snapshot's own nodes do not count


def test_rounds_stop_at_the_limit_with_the_pods_still_deferred(snap: dict[str, Any], tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    pending = _pending(snap)
    first = _out([_claim(f"default/{pending[0]}")], {}, pending=6, deferred=5)
    monkeypatch.setattr(peers, "run_karpenter", lambda *a, **k: pytest.fail("no second round at max_rounds=1"))
    result = peers.run_karpenter_rounds(Path("peer"), snap, first, tmp_path / "s.json", timeout=600,
                                        solve_bound=60.0, max_rounds=1)
    assert result["deferredPods"] == 5 and result["stopped"] == "the round limit (1) was reached"
