"""moto with the environment boto3 needs: in process (fake credentials, a region, and no endpoint override
left over from a moto-server test), or a moto server's endpoint, reset to an empty account."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from moto import mock_aws

from simulator.moto_server import SerialMotoServer


@contextmanager
def moto_environment(monkeypatch: pytest.MonkeyPatch, region: str) -> Iterator[None]:
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.setenv(key, "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", region)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        yield


def moto_server_environment(monkeypatch: pytest.MonkeyPatch, endpoint: str, region: str) -> None:
    """Point boto3 at the moto server at ``endpoint`` with fake credentials, and reset its state."""
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(key, "testing")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.setenv("AWS_DEFAULT_REGION", region)
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    with urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST"), timeout=120):
        pass


@contextmanager
def running_moto_server() -> Iterator[SerialMotoServer]:
    """A moto server on a free local port whose requests reach moto one at a time; stopped on exit."""
    server = SerialMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        yield server
    finally:
        server.stop()
