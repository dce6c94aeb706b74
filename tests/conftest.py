"""Shared fixtures: the Kubernetes API emulator over real HTTP."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from simulator.kube_api import KubeApiServer

# jsii prints a banner about the Node.js version when aws_cdk is first imported; noise in test output.
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "18,20")


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
                "aws" if any(f"[{aws}]" in nodeid for aws in ("moto", "sqs", "dynamodb")) else "other"
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
