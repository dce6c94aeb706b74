"""Shared fixtures: the Kubernetes API emulator over real HTTP."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling

from simulator.kube_api import KubeApiServer
from tests import moto_cost

# jsii prints a banner about the Node.js version when aws_cdk is first imported; noise in test output.
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "18,20")


# moto's EC2 models read MOTO_AMIS_PATH when first imported, which no test module does before this conftest runs.
moto_cost.install()


# What a test is parametrised with, or asks for, when it runs against tests/real_kube.py's control plane.
_REAL_PARAMS = {"server": "real", "real": "real"}
_REAL_FIXTURES = {"real_server", "real_cluster"}
_REAL_ID = re.compile(r"\[(?:[^\]]*-)?real(?:-[^\]]*)?\]")
REAL_CONTROL_PLANE_GROUP = "real-control-plane"


def on_real_control_plane(nodeid: str) -> bool:
    """Whether a test runs on the real control plane, from its id alone (all xdist's scheduler sees):
    the tests of tests/e2e/real_kube/ and those parametrised ``real``."""
    return "tests/e2e/real_kube/" in nodeid or _REAL_ID.search(nodeid) is not None


class _RealControlPlaneOnOneWorker(LoadScopeScheduling):
    """``--dist loadgroup`` (``make unit``): the tests on the real control plane are one unit of work, every
    other test a unit of its own. Each worker that runs such a test starts its own etcd, kube-apiserver,
    scheduler and controller manager (seconds of CPU to start, a steady background load until the session
    ends) on a 2-core machine; as the largest unit, the group is handed out first. (xdist's own
    ``xdist_group`` marker no longer reaches its scheduler under pytest 9.2, which ignores the node id xdist
    rewrites.)"""

    def _split_scope(self, nodeid: str) -> str:
        return REAL_CONTROL_PLANE_GROUP if on_real_control_plane(nodeid) else nodeid


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> LoadScopeScheduling | None:
    if config.getvalue("dist") == "loadgroup":
        return _RealControlPlaneOnOneWorker(config, log)
    return None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test on the real control plane whose id does not say so would start a second control plane on the
    other worker: refused, naming the test."""
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        real = any(params.get(name) == value for name, value in _REAL_PARAMS.items()) \
            or bool(_REAL_FIXTURES & set(getattr(item, "fixturenames", ()))) \
            or item.get_closest_marker("real_kube") is not None
        if real != on_real_control_plane(item.nodeid):
            raise pytest.UsageError(
                f"{item.nodeid}: {'runs' if real else 'does not run'} on the real control plane but its id says "
                f"otherwise; tests/conftest.py's on_real_control_plane() must agree (name the parameter 'real')")


@pytest.fixture
def kube_api() -> Iterator[KubeApiServer]:
    """A fresh emulator on 127.0.0.1: ``.url``, ``.store`` (seed / inspect directly) and
    ``.inject_error(path_substring, status, count)``. Point the official client at it with
    ``simulator.kube_api.client_for(kube_api.url)``."""
    with KubeApiServer() as server:
        yield server


@pytest.fixture(autouse=True)
def _generous_aws_read_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """moto answers in milliseconds on an idle machine, but a loaded CI machine can stall it past the
    functions' 10 s read timeout: in tests a slow answer is slow, never a failure (botocore still names the
    endpoint if one ever takes two minutes)."""
    from autoscaler.adapters.aws import _calls

    monkeypatch.setattr(_calls, "READ_TIMEOUT_SECONDS", 120.0)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The contract suite's count per server (tests/adapters/contract): both halves must be there, and the
    in-memory fakes held to the same tests."""
    counts: dict[str, dict[str, int]] = {}
    for outcome in ("passed", "failed", "skipped", "error"):
        for report in terminalreporter.stats.get(outcome, ()):
            nodeid = getattr(report, "nodeid", "")
            if "/contract/" not in nodeid or getattr(report, "when", "call") not in ("call", "setup"):
                continue
            if outcome == "passed" and report.when != "call":
                continue
            server = "real" if ("[real]" in nodeid or "[real-" in nodeid) else \
                "emulator" if "[emulator]" in nodeid else "fake" if ("[fake]" in nodeid or "[memory]" in nodeid) else \
                "aws" if any(f"[{aws}]" in nodeid for aws in ("moto", "sqs", "dynamodb", "lambda")) else "other"
            counts.setdefault(server, {}).setdefault(outcome, 0)
            counts[server][outcome] += 1
    if counts:
        for server in sorted(counts):
            summary = ", ".join(f"{n} {o}" for o, n in sorted(counts[server].items()))
            terminalreporter.write_line(f"contract tests [{server}]: {summary}")


def pytest_sessionfinish() -> None:
    # Stop this process's control plane while the session still owns the process (an xdist worker may be
    # ended before atexit handlers finish).
    from tests import real_kube

    real_kube.shutdown()
