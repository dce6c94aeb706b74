"""The README's commands work exactly as written, from a fresh clone.

Every line of the README's ``sh`` code blocks is run in a ``git clone`` of this work tree (its committed
state), from the clone's root, as a new user would type it. The clone reuses the venv running the tests
(``.venv`` links to it; ``make -o`` keeps make from re-syncing that shared venv) and ``PYTHONPATH`` puts the
clone's own code first. A block whose first line says it ``needs a live cluster`` is only parsed: each of
its ``autoscaler`` lines must be accepted by the CLI's argument parser. ``make test`` is the suite itself.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from autoscaler.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
NOT_RUN = {"make test": "the test suite itself"}
LIVE = "needs a live cluster"
# The make stamps of the install steps: the venv is shared and already installed.
MAKE_INSTALLED = ("-o", ".venv/.installed", "-o", ".venv/.installed-demo", "-o", ".venv/.installed-plot",
                  "-o", "node_modules/.installed")


def _blocks(text: str) -> list[list[str]]:
    return [block.splitlines() for block in re.findall(r"^```sh\n(.*?)^```", text, flags=re.S | re.M)]


def _command(line: str) -> str:
    return line.split(" #", 1)[0].strip()


def readme_commands() -> tuple[list[str], list[str]]:
    """(lines to run, lines only to parse), in README order."""
    run: list[str] = []
    parse: list[str] = []
    for block in _blocks(README.read_text(encoding="utf-8")):
        live = bool(block) and LIVE in block[0]
        for line in block:
            command = _command(line)
            if not command or command.startswith("#") or command in NOT_RUN:
                continue
            (parse if live else run).append(command)
    return run, parse


def test_the_readme_has_commands_to_run_and_says_how_to_run_autoscaler() -> None:
    run, parse = readme_commands()
    assert any(c.startswith("make demo") for c in run)
    for sub in ("simulate", "plan", "validate"):
        assert any(c.startswith(f".venv/bin/autoscaler {sub} ") for c in run), sub
    assert any(c.startswith(".venv/bin/autoscaler snapshot ") for c in parse)
    # a bare `autoscaler` only works in an activated venv, which the README must then say
    assert all(not c.startswith("autoscaler ") for c in run + parse)


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git work tree")
    path = tmp_path_factory.mktemp("readme") / "clone"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(path)], check=True, capture_output=True, timeout=300)
    (path / ".venv").symlink_to(Path(sys.prefix))
    if (ROOT / "node_modules").is_dir():
        (path / "node_modules").symlink_to(ROOT / "node_modules")
    return path


@pytest.mark.parametrize("command", readme_commands()[0])
def test_each_readme_command_runs_in_a_fresh_clone(clone: Path, command: str) -> None:
    argv = shlex.split(command)
    if argv[0] == "make":
        argv = ["make", *MAKE_INSTALLED, *argv[1:]]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(clone / "functions"), str(clone)]),
           "MPLBACKEND": "Agg"}
    result = subprocess.run(argv, cwd=clone, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert result.returncode == 0, (f"README command failed in a fresh clone: {command}\n"
                                    f"{(result.stdout + result.stderr)[-3000:]}")


@pytest.mark.parametrize("command", readme_commands()[1])
def test_each_readme_live_cluster_command_is_accepted_by_the_cli(command: str) -> None:
    argv = shlex.split(command)
    assert argv[0] == ".venv/bin/autoscaler"
    args = build_parser().parse_args(argv[1:])
    assert args.command == argv[1]
