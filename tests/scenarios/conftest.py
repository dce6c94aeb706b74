"""Scenario fixtures: one moto server and one instance catalog per session, shared with the e2e tests'
definitions (each scenario run resets moto and starts a fresh Kubernetes API emulator)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.conftest import local_catalog, moto_server

__all__ = ["local_catalog", "moto_server"]

SCENARIOS = Path(__file__).resolve().parents[2] / "simulator" / "scenarios"


@pytest.fixture(autouse=True)
def _no_xray(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "1")
