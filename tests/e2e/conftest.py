"""End-to-end fixtures: the handler tests' moto + emulator world (``aws``, ``world``); one moto server
and one instance catalog per session (reset per test), and a fresh Kubernetes API emulator per test,
through ``simulator.local.LocalCluster``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from moto.server import ThreadedMotoServer

from simulator.local import Catalog, LocalCluster, demo_config, moto_catalog
from tests.handlers.conftest import aws, world
from tests.moto_env import running_moto_server

__all__ = ["aws", "local", "local_catalog", "make_local", "moto_server", "world"]


@pytest.fixture(scope="session")
def moto_server() -> Iterator[ThreadedMotoServer]:
    with running_moto_server() as server:
        yield server


@pytest.fixture(scope="session")
def local_catalog() -> Catalog:
    return moto_catalog()


@pytest.fixture(autouse=True)
def _no_xray(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "1")


@pytest.fixture
def local(moto_server: ThreadedMotoServer, local_catalog: Catalog) -> Iterator[LocalCluster]:
    with LocalCluster.start(catalog=local_catalog, moto_server=moto_server) as env:
        yield env


def make_local(moto_server: ThreadedMotoServer, catalog: Catalog, **config: Any) -> Any:
    """A LocalCluster context with demo.yaml overridden by ``config`` (ClusterConfig fields)."""
    return LocalCluster.start(demo_config(**config), catalog=catalog, moto_server=moto_server)
