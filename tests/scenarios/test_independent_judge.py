"""The simulated cluster judges the product instead of agreeing with it: its nodes' allocatable comes from
simulator/eks_node.py and the instance's user data, so a wrong allocatable formula planted in the product
makes a shipped scenario fail (the planner packs pods onto nodes where kube-scheduler cannot place them)."""

from __future__ import annotations

from typing import Any

import pytest
from moto.server import ThreadedMotoServer

from autoscaler.domain import allocatable as product_allocatable
from autoscaler.domain.scheduling import existing_node, prepared
from simulator.local import Catalog
from simulator.sim.report import check
from simulator.sim.runner import run_scenario
from simulator.sim.scenario import load_scenario
from tests.scenarios.conftest import SCENARIOS

pytestmark = pytest.mark.e2e


def test_a_wrong_allocatable_in_the_product_fails_the_inflate_scenario(
        monkeypatch: pytest.MonkeyPatch, moto_server: ThreadedMotoServer, local_catalog: Catalog) -> None:
    # Given the product believes every node has twice the CPU and memory pods may use
    real = product_allocatable.allocatable

    def generous(*args: Any, **kwargs: Any) -> Any:
        out = dict(real(*args, **kwargs))
        out["cpu"], out["memory"] = out["cpu"] * 2, out["memory"] * 2
        return out

    for module in (prepared, existing_node):
        monkeypatch.setattr(module, "allocatable", generous)
    # When the inflate scenario (which passes with the product as shipped: tests/scenarios/test_inflate.py) runs
    scenario = load_scenario(SCENARIOS / "inflate.yaml")
    record = run_scenario(scenario, moto_server=moto_server, catalog=local_catalog)
    # Then the simulated kubelets report the true allocatable, kube-scheduler cannot place what the planner
    # packed, and the scenario's own assertions fail: pods wait for a second launch
    failed = [r for r in check(record, scenario.assertions) if not r["ok"]]
    assert failed, "a planted allocatable error went unnoticed"
    assert any(r["assertion"].startswith(("pending_pods", "running_pods", "time_to_running")) for r in failed), failed
