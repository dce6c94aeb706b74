"""Fixtures for the handler tests: in-process moto and the Kubernetes API emulator, wired into a runtime."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from autoscaler.handlers.runtime import set_runtime
from simulator.kube_api import KubeApiServer
from tests.handlers.interruption_world import REGION, World
from tests.moto_env import moto_environment


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "EKSServerlessAutoscaler")
    with moto_environment(monkeypatch, REGION):
        yield


@pytest.fixture
def world(aws: None, kube_api: KubeApiServer) -> Iterator[World]:
    w = World.create(kube_api)
    yield w
    set_runtime(None)
