"""benchmarks/cost.py reads its figures from the synthesised template: memory, schedules, alarms."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.cost import COMPUTE, Inputs, bill, read_stack
from tests.infra.conftest import ROOT, Synth


@pytest.fixture
def template(demo: Synth, tmp_path: Path) -> Path:
    path = tmp_path / "demo.template.json"
    path.write_text(json.dumps(demo.template.to_json()))
    return path


def test_the_bill_follows_the_template(template: Path) -> None:
    # Given the demo stack's template (watch mode, 1,024 MB, two 1-minute schedules, 14 alarms)
    stack = read_stack(cluster=ROOT / "clusters" / "demo.yaml", template=template)
    assert stack.functions["provisioner"]["memoryMb"] == 1024 and stack.alarms == 14
    # When the idle month is costed
    watch = bill(stack, Inputs(), option="watch", busy=False)
    scheduled = bill(stack, Inputs(), option="scheduled", busy=False)
    # Then watch mode is ~51 s of 1,024 MB every minute, and dashboard and alarms are list prices
    assert watch.items["lambda:provisioner"] == pytest.approx(43_800 * 51 * 0.0000133334, rel=1e-3)
    assert watch.items["dashboard"] == 3.0 and watch.items["alarms"] == 1.4
    assert scheduled.total(*COMPUTE) < 5.0 < watch.total(*COMPUTE)


def test_memory_in_the_template_changes_the_bill(template: Path, tmp_path: Path) -> None:
    # Given the same template with the provisioner at 256 MB
    data = json.loads(template.read_text())
    for resource in data["Resources"].values():
        if resource["Type"] == "AWS::Lambda::Function" and "provisioner" in resource["Properties"]["Handler"]:
            resource["Properties"]["MemorySize"] = 256
    small = tmp_path / "small.json"
    small.write_text(json.dumps(data))
    stack = read_stack(cluster=ROOT / "clusters" / "demo.yaml", template=small)
    # Then watch mode costs a quarter
    assert bill(stack, Inputs(), option="watch", busy=False).items["lambda:provisioner"] == pytest.approx(
        43_800 * 51 * 0.25 * 0.0000133334, rel=1e-3)
