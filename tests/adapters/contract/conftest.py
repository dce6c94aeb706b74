"""The contract suite's servers: every test here runs against the real kube-apiserver (``[real]``, with the
shipped RBAC applied and the product's own identities) and against the emulator (``[emulator]``). A test of
the ``ClusterPort``'s behaviour alone (seeding through the admin channel's ``create`` / ``get`` /
``status_patch``, then calling the port) runs against the service tests' in-memory fake too (``[fake]``,
``tests/app/fakes_cluster.FakeCluster``, marked ``@port_level``): the fake may never be more forgiving than
the adapter on a real server.

A ``Server`` gives the test an admin channel for seeding and inspecting (plain HTTP requests, the same
for both), the product's ``KubeCluster`` as a function identity, and the few things that differ in how
a test provokes them (etcd compaction). Each test works in its own namespace and names its nodes after
it, so tests share one control plane per worker without seeing each other's objects.
"""

from __future__ import annotations

import itertools
import json
import re
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler.adapters.clock import SystemClock
from autoscaler.adapters.kube.auth import api_client_for_endpoint
from autoscaler.adapters.kube.cluster import KubeCluster
from simulator.kube_api import KubeApiServer
from simulator.kube_store import ApiError, Store
from tests import real_kube
from tests.app.fakes_cluster import FakeCluster
from tests.waiting import wait_for

SERVERS = ("real", "emulator")
# A test of the port alone: it also holds the service tests' fake (tests/app/fakes_cluster.py) to the contract.
port_level = pytest.mark.parametrize("server", [*SERVERS, "fake"], indirect=True)
# /api/v1/nodes/n, /api/v1/namespaces/ns/pods/p, /apis/policy/v1/namespaces/ns/poddisruptionbudgets, ...
_PATH = re.compile(r"^/apis?/(?:[^/]+/)?v1(?:/namespaces/(?P<ns>[^/]+))?/(?P<plural>[^/]+)(?:/(?P<name>[^/]+))?$")
RBAC_DIR = Path(__file__).resolve().parents[3] / "infra" / "rbac"
_counter = itertools.count()


class ApiStatus(Exception):
    def __init__(self, status: int, body: Any) -> None:
        super().__init__(f"HTTP {status}: {body}")
        self.status, self.body = status, body


@dataclass
class Server:
    kind: str  # "real", "emulator" or "fake"
    url: str
    plane: real_kube.ControlPlane | None = None
    emulator: KubeApiServer | None = None
    store: Store | None = None  # the fake's objects (kind "fake": no HTTP server)
    fake: type[FakeCluster] = FakeCluster  # tests/adapters/contract/test_fakes_are_strict.py plants forgiving ones

    # ----- the admin channel -------------------------------------------------------------------
    def request(self, method: str, path: str, body: Any = None, *, content_type: str = "application/json",
                identity: real_kube.Identity = real_kube.ADMIN) -> tuple[int, Any]:
        if self.store is not None:
            return self._fake_request(method, path, body, content_type=content_type)
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

    def _fake_request(self, method: str, path: str, body: Any, *, content_type: str) -> tuple[int, Any]:
        """The admin channel of the fake: the object store's own create / get / patch / delete (no query
        strings: a test that sends raw HTTP tests the server, not the port, and does not run on the fake)."""
        assert self.store is not None
        sub = ""
        for suffix in ("/status", "/eviction"):
            if path.endswith(suffix):
                path, sub = path[: -len(suffix)], suffix
        match = _PATH.match(path)
        if match is None or "?" in path:
            raise AssertionError(f"the fake's admin channel does not serve {method} {path}: mark the test "
                                 "for the servers only")
        plural, ns, name = match["plural"], match["ns"], match["name"]
        try:
            if sub == "/eviction" and method == "POST" and name is not None:
                return 201, self.store.evict(ns or "default", name, body)
            if method == "GET" and name is None:
                return 200, {"items": self.store.list(plural, namespace=ns)}
            if method == "POST" and name is None:
                return 201, self.store.create(plural, body, namespace=ns, request=True)
            if method == "GET" and name is not None:
                return 200, self.store.get(plural, ns, name)
            if method == "PATCH" and name is not None:
                return 200, self.store.patch(plural, ns, name, body, content_type=content_type)
            if method == "DELETE" and name is not None:
                options = body or {}
                return 200, self.store.delete(plural, ns, name, grace_period_seconds=options.get("gracePeriodSeconds"),
                                              precondition_uid=(options.get("preconditions") or {}).get("uid"))
        except ApiError as err:
            return err.code, err.status()
        raise AssertionError(f"the fake's admin channel does not serve {method} {path}")

    # ----- the product ---------------------------------------------------------------------------
    def cluster(self, identity: str = "provisioner", **kwargs: Any) -> KubeCluster | FakeCluster:
        """The product's adapter as a function identity (on the real server: under the shipped RBAC); on
        ``fake``, the in-memory fake over the same objects the admin channel wrote."""
        if self.store is not None:
            return self.fake(self.store, clock=SystemClock())
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


@pytest.fixture
def fake_server() -> Server:
    # Graceful deletion as the real API server (see emulator_server); one store per test.
    return Server("fake", "", store=Store(graceful_deletion=True))


@pytest.fixture(params=SERVERS)
def server(request: pytest.FixtureRequest) -> Server:
    fixture = {"real": "real_server", "emulator": "emulator_server", "fake": "fake_server"}[request.param]
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
