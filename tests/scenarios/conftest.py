"""Scenario fixtures: one moto server and one instance catalog per session, shared with the e2e tests'
definitions (each scenario run resets moto and starts a fresh Kubernetes API emulator)."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import local_catalog, moto_server
from tests.scenarios.recording import SCENARIOS

__all__ = ["SCENARIOS", "local_catalog", "moto_server"]


@pytest.fixture(autouse=True)
def _no_xray(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "1")
