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
