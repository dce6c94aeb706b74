"""The soak benchmark's oracle and a short soak: passes with random faults never launch twice and never
overshoot a NodePool limit (``benchmarks/provisioner_soak.py`` runs 200 passes; CI runs 25)."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.provisioner_soak import Oracle, run

pytestmark = pytest.mark.e2e


def test_a_short_soak_with_faults_launches_exactly_what_is_needed(moto_server: Any, local_catalog: Any) -> None:
    result = run(passes=25, seed=5, moto_server=moto_server, catalog=local_catalog)
    # faults really happened (a soak without them proves nothing)
    assert result["killed"] >= 1 and result["lostAnswers"] >= 1 and result["describeLag"] >= 1
    assert result["throttled"] >= 1 and result["overlapping"] >= 1 and result["instances"] >= 5
    # and nothing was launched twice, without its record, or over the NodePool's limit
    assert result["extraInstances"] == 0, result["extraIds"]
    assert result["unaccounted"] == 0, result["unaccountedIds"]
    assert result["limitOvershootVcpu"] == 0


class _NoEc2:
    def get_paginator(self, _: str) -> Any:
        class _P:
            def paginate(self, **__: Any) -> list[dict[str, Any]]:
                return []
        return _P()


def test_the_oracle_flags_a_second_launch_for_pods_whose_first_node_is_not_ready() -> None:
    oracle = Oracle(ec2=_NoEc2())
    oracle.claims = {
        "a": {"id": "a", "state": "launched", "instanceId": "i-1", "pods": ["ns/p1", "ns/p2"]},
        "b": {"id": "b", "state": "launched", "instanceId": "i-2", "pods": ["ns/p2"]},
        "c": {"id": "c", "state": "launched", "instanceId": "i-3", "pods": ["ns/p3"]},
    }
    oracle.launched_pass = {"i-1": 0, "i-2": 1, "i-3": 1}
    oracle.not_ready_before = {1: {"i-1"}}
    assert oracle.verdict()["extraIds"] == ["i-2"]
    # once i-1 is an initialised node, a pod that did not fit there is legitimately launched for again
    oracle.not_ready_before = {1: set()}
    assert oracle.verdict()["extraInstances"] == 0
