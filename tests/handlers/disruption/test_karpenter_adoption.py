"""Nodes Karpenter launched (its NodePool or v0.2x Provisioner tag plus the cluster tag, none of ours),
through the disruption handler on moto + the Kubernetes API emulator: adopted with
``migration.adoptKarpenterNodes`` (removed when empty, Karpenter's finalizer released so the Node delete
completes), left alone with one log line otherwise."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from autoscaler.domain.keys import KARPENTER_TERMINATION_FINALIZER

FLAVOURS = [
    pytest.param("karpenter.sh/nodepool", id="karpenter-v1-nodepool"),
    pytest.param("karpenter.sh/provisioner-name", id="karpenter-v0.2x-provisioner-name"),
]


def _karpenter_node(w: Any, flavour: str) -> tuple[str, str]:
    iid = w.karpenter_instance(pool_tag=flavour)
    name = w.register(iid, pool_label=flavour, finalizers=[KARPENTER_TERMINATION_FINALIZER])
    w.pod("agent", name, owner="DaemonSet")  # DaemonSet pods do not make a node busy
    return iid, name


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_an_adopted_empty_karpenter_node_is_removed_and_its_finalizer_released(make_world: Any, flavour: str) -> None:
    # Given adoption on and an empty node Karpenter launched, carrying Karpenter's termination finalizer
    w = make_world(migration={"adoptKarpenterNodes": True})
    iid, name = _karpenter_node(w, flavour)

    # When the disruption function has seen it empty for longer than consolidateAfter
    w.run()
    w.clock.advance(31)
    report = w.run()

    # Then it is removed like ours: the instance terminated and the Node really gone (finalizer released)
    assert report["removed"] == [name] and report["decisions"][0]["reason"] == "Empty"
    assert report["blocked"] == []
    assert w.state(iid) in ("shutting-down", "terminated")
    assert name not in w.nodes()
    assert w.sink.total("NodesDisrupted", Reason="Empty") == 1


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_without_adoption_a_karpenter_node_is_left_alone_with_one_log_line(
        make_world: Any, flavour: str, caplog: pytest.LogCaptureFixture) -> None:
    # Given adoption off (the default) and an empty node Karpenter launched
    w = make_world()
    iid, name = _karpenter_node(w, flavour)
    caplog.set_level(logging.INFO, logger="autoscaler.disruption")

    # When passes run every minute for five minutes
    reports = []
    for _ in range(5):
        reports.append(w.run())
        w.clock.advance(60)

    # Then the node stays untouched, no pass reports it blocked nor writes an Event on it, and one log line
    # (not one per pass) says why and what to set; the gauge counts it
    assert name in w.nodes() and w.state(iid) == "running"
    assert all(r["blocked"] == [] and r["decisions"] == [] and r["removed"] == [] for r in reports)
    assert w.events(name) == []
    assert w.sink.total("DisruptionBlocked") == 0
    said = [r.getMessage() for r in caplog.records if "launched by Karpenter" in r.getMessage()]
    assert len(said) == 1 and name in said[0] and "migration.adoptKarpenterNodes" in said[0]
    assert [v for m, v, _ in w.sink.points if m == "KarpenterNodesNotAdopted"] == [1.0] * 5


def test_adoption_takes_only_this_clusters_karpenter_nodes(make_world: Any) -> None:
    # Given adoption on and an empty node whose instance Karpenter launched for ANOTHER cluster
    w = make_world(migration={"adoptKarpenterNodes": True})
    iid = w.karpenter_instance(cluster="someone-else")
    name = w.register(iid)

    # When passes run past consolidateAfter
    w.run()
    w.clock.advance(31)
    report = w.run()

    # Then it is not ours: blocked as NotOurs, never terminated
    assert name in w.nodes() and w.state(iid) == "running"
    assert [(b["node"], b["guard"]) for b in report["blocked"]] == [(name, "NotOurs")]
