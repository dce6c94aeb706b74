"""The layer contracts in .importlinter are live: a forbidden import makes the check (and so
``make test``) fail, and the real tree passes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": f"{tree / 'functions'}{os.pathsep}{tree}"}
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=tree, env=env, capture_output=True, text=True,
                          check=False)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    for part in ("functions", "simulator", "benchmarks"):
        shutil.copytree(ROOT / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / ".importlinter", tmp_path / ".importlinter")
    return tmp_path


def test_the_tree_keeps_its_layers(tree: Path) -> None:
    result = _lint(tree)
    assert result.returncode == 0, result.stdout


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        ("functions/autoscaler/domain/quantity.py", "import boto3", "The domain imports no AWS"),
        ("functions/autoscaler/domain/models.py", "import kubernetes", "The domain imports no AWS"),
        ("functions/autoscaler/adapters/kube/cluster.py", "import autoscaler.adapters.aws.cloud",
         "never import each other"),
        ("functions/autoscaler/domain/plan.py", "import autoscaler.handlers.runtime", "Entry points over adapters"),
        ("functions/autoscaler/domain/plan.py", "import autoscaler.app.ports", "Entry points over adapters"),
        ("functions/autoscaler/app/drain.py", "import autoscaler.adapters.clock", "Entry points over adapters"),
        ("functions/autoscaler/app/provisioner.py", "import botocore.exceptions", "only through the ports"),
        ("functions/autoscaler/cli.py", "import simulator.kube_api", "never imports the simulator"),
        ("functions/autoscaler/handlers/interruption.py", "import boto3", "no boto3 or botocore in a handler"),
        ("simulator/sim/report.py", "import autoscaler.cli", "never import the CLI"),
        ("simulator/sim/tasks.py", "import simulator.sim.engine", "never import its event loop"),
        ("simulator/sim/kubelet.py", "import autoscaler.domain.allocatable", "The simulated cluster judges"),
        ("simulator/local.py", "import autoscaler.domain.quantity", "The simulated cluster judges"),
        ("simulator/local.py", "from autoscaler.domain.models import InstanceType", "The simulated cluster judges"),
    ],
)
def test_a_forbidden_import_breaks_the_check(tree: Path, module: str, line: str, contract: str) -> None:
    path = tree / module
    path.write_text(path.read_text() + f"\n{line}  # deliberately wrong\n")
    result = _lint(tree)
    assert result.returncode != 0
    assert f"{contract}" in result.stdout
    assert "BROKEN" in result.stdout
