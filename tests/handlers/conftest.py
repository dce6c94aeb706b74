"""Fixtures for the handler tests: in-process moto and the Kubernetes API emulator, wired into a runtime."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from moto import mock_aws

from autoscaler.handlers.runtime import set_runtime
from simulator.kube_api import KubeApiServer
from tests.handlers.interruption_world import REGION, World


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.setenv(key, "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "EKSServerlessAutoscaler")
    with mock_aws():
        yield


@pytest.fixture
def world(aws: None, kube_api: KubeApiServer) -> Iterator[World]:
    w = World.create(kube_api)
    yield w
    set_runtime(None)
