"""`autoscaler simulate`: a thin entry point into the simulator, which the Lambda bundle lacks."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest

from autoscaler import cli


def test_without_the_simulator_the_command_says_what_to_do(monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    # Given an installation without the simulator package (the Lambda bundle, a wheel install)
    real = importlib.import_module

    def no_simulator(name: str, *args: Any) -> Any:
        if name.startswith("simulator"):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", no_simulator)
    # When simulate is asked for
    code = cli.main(["simulate", "simulator/scenarios/inflate.yaml"])
    # Then it fails with a message naming where the simulator lives and how to run it
    assert code == 2
    err = capsys.readouterr().err
    assert "simulator is not installed" in err and "python -m simulator.simulate" in err


def test_a_missing_scenario_file_is_named(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code = cli.main(["simulate", str(tmp_path / "nope.yaml")])
    assert code == 2
    assert "nope.yaml not found" in capsys.readouterr().err


@pytest.mark.parametrize(("body", "message"), [
    ("name: x\ntimeline: [{at: 1m}]\n", "exactly one of scale, apply, deployment, delete"),
    ("name: x\nuntil: soon\n", "until"),
    ("name: x\nbogus: 1\n", "bogus"),
    ("name: x\ncluster: nowhere.yaml\n", "cluster: 'nowhere.yaml' not found"),
])
def test_a_bad_scenario_is_refused_with_the_field(body: str, message: str, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(body)
    assert cli.main(["simulate", str(path)]) == 2
    assert message in capsys.readouterr().err
