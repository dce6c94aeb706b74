"""The package imports, the CLI answers, and the domain vocabulary behaves."""

from __future__ import annotations

import subprocess
import sys

import pytest

import autoscaler
from autoscaler.cli import main
from autoscaler.domain.quantity import QuantityError, cpu_millis, to_int


def test_package_has_a_version() -> None:
    assert autoscaler.__version__.count(".") == 2


def test_cli_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    assert "autoscaler" in capsys.readouterr().out


def test_console_script_runs_as_a_module() -> None:
    out = subprocess.run([sys.executable, "-m", "autoscaler.cli", "--version"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"autoscaler {autoscaler.__version__}"


@pytest.mark.parametrize(
    ("text", "millis"),
    [("100m", 100), ("1", 1000), ("1.5", 1500), ("0.0001", 1), (2, 2000), ("1e3", 1_000_000)],
)
def test_cpu_quantities(text: str, millis: int) -> None:
    assert cpu_millis(text) == millis


@pytest.mark.parametrize(
    ("text", "value"),
    [("1Gi", 2**30), ("100Mi", 100 * 2**20), ("2G", 2 * 10**9), ("1E", 10**18), ("128974848", 128974848),
     ("1k", 1000), ("500m", 1)],
)
def test_byte_quantities(text: str, value: int) -> None:
    assert to_int(text) == value


@pytest.mark.parametrize("bad", ["", "abc", "1Zi", "--1", "1.2.3"])
def test_bad_quantities_are_rejected(bad: str) -> None:
    with pytest.raises(QuantityError):
        to_int(bad)
