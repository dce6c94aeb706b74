"""The contract suite's servers: every test here runs against the real kube-apiserver (``[real]``, with the
shipped RBAC applied and the product's own identities) and against the emulator (``[emulator]``).

A ``Server`` gives the test an admin channel for seeding and inspecting (plain HTTP requests, the same
for both), the product's ``KubeCluster`` as a function identity, and the few things that differ in how
a test provokes them (etcd compaction). Each test works in its own namespace and names its nodes after
it, so tests share one control plane per worker without seeing each other's objects.
"""

from __future__ import annotations

import itertools
import json
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler.adapters.clock import SystemClock
from autoscaler.adapters.kube.auth import api_client_for_endpoint
from autoscaler.adapters.kube.cluster import KubeCluster
from simulator.kube_api import KubeApiServer
from simulator.kube_store import Store
from tests import real_kube

SERVERS = ("real", "emulator")
RBAC_DIR = Path(__file__).resolve().parents[3] / "infra" / "rbac"
_counter = itertools.count()


class ApiStatus(Exception):
    def __init__(self, status: int, body: Any) -> None:
        super().__init__(f"HTTP {status}: {body}")
        self.status, self.body = status, body


@dataclass
class Server:
    kind: str  # "real" or "emulator"
    url: str
    plane: real_kube.ControlPlane | None = None
    emulator: KubeApiServer | None = None

    # ----- the admin channel -------------------------------------------------------------------
    def request(self, method: str, path: str, body: Any = None, *, content_type: str = "application/json",
                identity: real_kube.Identity = real_kube.ADMIN) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Accept": "application/json", "Authorization": f"Bearer {identity.token}"}
        if data is not None:
            headers["Content-Type"] = content_type
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        ctx = ssl.create_default_context()
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        try:
            with urllib.request.urlopen(req, context=ctx if self.url.startswith("https") else None,
                                        timeout=30) as resp:
                status, raw = resp.status, resp.read()
        except urllib.error.HTTPError as err:
            status, raw = err.code, err.read()
        return status, json.loads(raw) if raw else None

    def must(self, method: str, path: str, body: Any = None, **kwargs: Any) -> Any:
        status, out = self.request(method, path, body, **kwargs)
        if not 200 <= status < 300:
            raise ApiStatus(status, out)
        return out

    def create(self, path: str, obj: dict[str, Any]) -> dict[str, Any]:
        """POST ``obj``. A pod created unbound stays unbound (a nodeSelector no node matches): the real
        kube-scheduler would otherwise bind it to a node of another test."""
        if path.endswith("/pods") and not (obj.get("spec") or {}).get("nodeName"):
            obj = {**obj, "spec": {**obj.get("spec", {}), "nodeSelector": {"contract.test/never": "true"}}}
        out: dict[str, Any] = self.must("POST", path, obj)
        return out

    def get(self, path: str) -> dict[str, Any] | None:
        status, out = self.request("GET", path)
        if status == 404:
            return None
        if status != 200:
            raise ApiStatus(status, out)
        return dict(out)

    def status_patch(self, path: str, status: dict[str, Any]) -> dict[str, Any]:
        """Merge-patch an object's status subresource, as the kubelet and controllers write it."""
        out: dict[str, Any] = self.must("PATCH", f"{path}/status", {"status": status},
                                        content_type="application/merge-patch+json")
        return out

    # ----- the product ---------------------------------------------------------------------------
    def cluster(self, identity: str = "provisioner", **kwargs: Any) -> KubeCluster:
        """The product's adapter as a function identity (on the real server: under the shipped RBAC)."""
        token = real_kube.IDENTITIES[identity].token
        api = api_client_for_endpoint(self.url, token=token, verify_tls=False)
        return KubeCluster(api, clock=SystemClock(), **kwargs)

    # ----- what differs in how a test provokes it -------------------------------------------------
    def compact(self) -> None:
        """Drop the server's history: etcd compaction on the real server, the watch log on the emulator."""
        if self.plane is not None:
            self.plane.compact_etcd()
        else:
            assert self.emulator is not None
            self.emulator.store.compact()


def wait_for(check: Callable[[], Any], *, timeout: float = 60.0, what: str = "condition") -> Any:
    """Poll ``check`` until it returns something truthy (the real server's controllers are asynchronous)."""
    end = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.1)


@pytest.fixture(scope="session")
def real_server() -> Server:
    plane = real_kube.control_plane()
    docs = [d for f in sorted(RBAC_DIR.glob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d]
    plane.apply_manifest(docs)
    return Server("real", plane.url, plane=plane)


@pytest.fixture(scope="session")
def emulator_server() -> Iterator[Server]:
    # Graceful deletion as the real API server does it (a bound pod keeps a deletionTimestamp until its
    # kubelet confirms): the contract compares the two under the same semantics.
    with KubeApiServer(store=Store(graceful_deletion=True)) as emu:
        yield Server("emulator", emu.url, emulator=emu)


@pytest.fixture(params=SERVERS)
def server(request: pytest.FixtureRequest) -> Server:
    fixture = "real_server" if request.param == "real" else "emulator_server"
    return request.getfixturevalue(fixture)  # type: ignore[no-any-return]


@pytest.fixture
def ns(server: Server) -> Iterator[str]:
    """A namespace of this test's own (pods can be created in it: its default ServiceAccount exists)."""
    name = f"c{next(_counter)}-{int(time.time() * 1000) % 10**8}"
    server.create("/api/v1/namespaces", {"metadata": {"name": name}})
    if server.kind == "real":
        wait_for(lambda: server.get(f"/api/v1/namespaces/{name}/serviceaccounts/default"),
                 what=f"the default ServiceAccount of {name}")
    yield name
    server.request("DELETE", f"/api/v1/namespaces/{name}")


@pytest.fixture
def node_name(server: Server, ns: str) -> Iterator[str]:
    """A node name of this test's own; the node is deleted (finalizers dropped) afterwards."""
    name = f"node-{ns}"
    yield name
    current = server.get(f"/api/v1/nodes/{name}")
    if current and current["metadata"].get("finalizers"):
        server.request("PATCH", f"/api/v1/nodes/{name}", {"metadata": {"finalizers": None}},
                       content_type="application/merge-patch+json")
    server.request("DELETE", f"/api/v1/nodes/{name}")
