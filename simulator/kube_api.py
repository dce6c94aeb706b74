"""An emulator of the Kubernetes REST API on 127.0.0.1, for tests, benchmarks and the demo.

The official ``kubernetes`` client and ``kubectl --server http://127.0.0.1:N`` talk to it over real
HTTP. It serves discovery (``/api``, ``/apis``, ``/version``), get / list / watch / create / replace /
patch / delete on the kinds in ``simulator.kube_store.RESOURCES``, and the pods ``binding``,
``eviction`` and ``status`` subresources. The object semantics live in ``kube_store``.

Run by hand::

    python -m simulator.kube_api --port 8001
    kubectl --server http://127.0.0.1:8001 get nodes

Fault injection over HTTP (for a separately running emulator)::

    curl -XPOST 127.0.0.1:8001/_emulator/inject -d '{"path": "/pods", "status": 500, "count": 2}'

Requests served, by verb and resource (what a pass costs the API server)::

    curl 127.0.0.1:8001/_emulator/stats     # {"requests": {"GET pods": 3, "POST events": 100, ...}}
"""

from __future__ import annotations

import argparse
import json
import threading
from collections import Counter
from collections.abc import Iterator
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from kubernetes.client import ApiClient, Configuration

from simulator.kube_store import BY_PLURAL, RESOURCES, ApiError, Obj, Resource, Store

SERVER_VERSION = {"major": "1", "minor": "31", "gitVersion": "v1.31.0-emulator", "gitCommit": "emulator",
                  "gitTreeState": "clean", "buildDate": "2024-08-13T00:00:00Z", "goVersion": "go1.22",
                  "compiler": "gc", "platform": "linux/amd64"}
DROPPED_BODY = b'{"type":"ADD'  # the half chunk a dropped connection leaves
_VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]


def _groups() -> dict[str, list[Resource]]:
    out: dict[str, list[Resource]] = {}
    for r in RESOURCES:
        out.setdefault(r.api_version, []).append(r)
    return out


def _resource_list(group_version: str) -> Obj:
    resources: list[Obj] = []
    for r in _groups().get(group_version, []):
        resources.append({"name": r.plural, "singularName": r.kind.lower(), "namespaced": r.namespaced,
                          "kind": r.kind, "verbs": _VERBS, "shortNames": list(r.short_names)})
        for sub in r.subresources:
            kind, verbs = {"binding": ("Binding", ["create"]),
                           "eviction": ("Eviction", ["create"])}.get(sub, (r.kind, ["get", "patch", "update"]))
            entry: Obj = {"name": f"{r.plural}/{sub}", "singularName": "", "namespaced": r.namespaced,
                          "kind": kind, "verbs": verbs}
            if sub == "eviction":
                entry.update(group="policy", version="v1")
            resources.append(entry)
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}


def _group_list() -> Obj:
    groups = []
    for gv in _groups():
        if "/" not in gv:
            continue
        name, version = gv.split("/")
        ver = {"groupVersion": gv, "version": version}
        groups.append({"name": name, "versions": [ver], "preferredVersion": ver})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


class _Routes:
    """The API's request handling, independent of the transport: ``_Handler`` serves it over HTTP and
    ``simulator.kube_inprocess`` calls it in-process. A transport provides ``server``, ``path``,
    ``headers`` and the ``_send`` / ``_read_body`` / ``_body_drain`` / ``_stream`` / ``_drop`` plumbing."""

    server: _Server
    path: str
    headers: Any
    _body_read: bool

    def _send(self, code: int, body: Obj | bytes) -> None:
        raise NotImplementedError

    def _body(self) -> Any:
        raise NotImplementedError

    def _body_drain(self) -> None:
        raise NotImplementedError

    def _stream(self, chunks: Iterator[bytes]) -> None:
        """A 200 answer with ``Transfer-Encoding: chunked``, one chunk per item of ``chunks`` (a watch)."""
        raise NotImplementedError

    def _drop(self) -> None:
        """A dropped connection: a 200 header and half a chunk, then the connection closes (a load
        balancer's idle cut, an API server restart)."""
        raise NotImplementedError

    def _read_body(self) -> Any:
        self._body_read = True
        return self._body()

    def _dispatch(self, method: str) -> None:
        url = urlsplit(self.path)
        self._body_read = False  # one handler serves every request of a kept-alive connection
        if not url.path.startswith("/_emulator/"):
            self.server.count(method, url.path)
        try:
            injected = self.server.store.take_injected(method, url.path, url.query)
            if injected == 0:
                self._body_drain()
                self._drop()
                return
            if injected is not None:
                reason = HTTPStatus(injected).phrase.replace(" ", "") if injected in HTTPStatus._value2member_map_ \
                    else "Unknown"
                raise ApiError(injected, reason, f"injected error {injected} for {method} {url.path}")
            query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
            if query.get("watch") in ("1", "true"):
                self.server.store.watches.append(url.path)
            self._route(method, url.path, query)
        except ApiError as err:
            self._body_drain()
            self._send(err.code, err.status())
        except (BrokenPipeError, ConnectionResetError):
            pass

    # ----- routing ---------------------------------------------------------------------------
    def _route(self, method: str, path: str, query: dict[str, str]) -> None:
        store = self.server.store
        parts = [p for p in path.split("/") if p]
        if path in ("/healthz", "/livez", "/readyz"):
            self._send(200, b"ok")
            return
        if path.rstrip("/") == "/version":
            self._send(200, SERVER_VERSION)
            return
        if parts[:2] == ["_emulator", "stats"] and method == "GET":
            self._send(200, {"requests": self.server.stats()})
            return
        if parts[:2] == ["_emulator", "inject"] and method == "POST":
            body = self._read_body() or {}
            store.inject_error(str(body["path"]), int(body["status"]), int(body.get("count", 1)),
                               method=body.get("method"))
            self._send(200, {"ok": True})
            return
        if parts == ["api"]:
            host = self.headers.get("Host") or "127.0.0.1"
            self._send(200, {"kind": "APIVersions", "versions": ["v1"],
                             "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": host}]})
            return
        if parts == ["apis"]:
            self._send(200, _group_list())
            return
        if len(parts) >= 2 and parts[0] == "api":
            gv, rest = parts[1], parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            gv, rest = f"{parts[1]}/{parts[2]}", parts[3:]
        elif len(parts) == 2 and parts[0] == "apis":
            name = parts[1]
            group = next((g for g in _group_list()["groups"] if g["name"] == name), None)
            if group is None:
                raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
            self._send(200, {"kind": "APIGroup", "apiVersion": "v1", **group})
            return
        else:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
        if not rest:
            if gv not in _groups():
                raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
            self._send(200, _resource_list(gv))
            return
        namespace: str | None = None
        if rest[0] == "namespaces" and len(rest) >= 3 and rest[2] in BY_PLURAL:
            namespace, rest = rest[1], rest[2:]
        plural = rest[0]
        res = BY_PLURAL.get(plural)
        if res is None or res.api_version != gv:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if name is None:
            self._collection(method, res, namespace, query)
        else:
            self._item(method, res, namespace, name, sub=sub, query=query)

    def _collection(self, method: str, res: Resource, namespace: str | None, query: dict[str, str]) -> None:
        store = self.server.store
        if method == "POST":
            body = self._read_body()
            if not isinstance(body, dict):
                raise ApiError(400, "BadRequest", f"create {res.kind}: body must be a JSON object")
            self._send(201, store.create(res.plural, body, namespace=namespace, request=True))
            return
        if method != "GET":
            raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on the {res.plural} collection")
        if query.get("watch") in ("1", "true", "True"):
            self._watch(res, namespace, query)
            return
        limit = int(query["limit"]) if query.get("limit") else None
        items, rv, token, _ = store.list_raw(
            res.plural, namespace=namespace, label_selector=query.get("labelSelector"),
            field_selector=query.get("fieldSelector"), limit=limit, continue_token=query.get("continue") or None)
        meta: Obj = {"resourceVersion": rv}
        if token:
            meta["continue"] = token
        head = json.dumps({"kind": f"{res.kind}List", "apiVersion": res.api_version, "metadata": meta},
                          separators=(",", ":")).encode()
        self._send(200, head[:-1] + b',"items":[' + b",".join(items) + b"]}")

    def _watch(self, res: Resource, namespace: str | None, query: dict[str, str]) -> None:
        store = self.server.store
        timeout = float(query.get("timeoutSeconds") or 1800)
        stream: Iterator[Obj] = store.watch(
            res.plural, namespace=namespace, resource_version=query.get("resourceVersion"),
            label_selector=query.get("labelSelector"), field_selector=query.get("fieldSelector"),
            timeout=timeout, stop=self.server.stopping,
            bookmarks=query.get("allowWatchBookmarks") in ("1", "true", "True"))
        # Validated and established above (a bad request raised before any header); as kube-apiserver's
        # watch handler, the 200 header goes out and is flushed now, before any event exists.
        self._stream(json.dumps(event, separators=(",", ":")).encode() + b"\n" for event in stream)

    def _item(self, method: str, res: Resource, namespace: str | None, name: str, *, sub: str | None,
              query: dict[str, str]) -> None:
        store = self.server.store
        if sub is not None and sub not in res.subresources:
            raise ApiError(404, "NotFound", f"{res.plural}/{sub} is not a subresource the emulator serves")
        if method == "GET":
            self._send(200, store.get(res.plural, namespace, name))
        elif method == "POST" and sub == "eviction":
            self._send(201, store.evict(namespace or "default", name, self._read_body()))
        elif method == "POST" and sub == "binding":
            body = self._read_body() or {}
            target = (body.get("target") or {}).get("name")
            if not target:
                raise ApiError(400, "BadRequest", "Binding: target.name is required")
            store.bind(namespace or "default", name, str(target))
            self._send(201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})
        elif method == "PUT":
            body = self._read_body()
            if not isinstance(body, dict):
                raise ApiError(400, "BadRequest", f"replace {res.kind}: body must be a JSON object")
            self._send(200, store.replace(res.plural, namespace, name, body))
        elif method == "PATCH":
            ctype = self.headers.get("Content-Type") or "application/merge-patch+json"
            self._send(200, store.patch(res.plural, namespace, name, self._read_body(), content_type=ctype))
        elif method == "DELETE":
            body = self._read_body() or {}
            grace = body.get("gracePeriodSeconds", query.get("gracePeriodSeconds"))
            uid = (body.get("preconditions") or {}).get("uid")
            self._send(200, store.delete(res.plural, namespace, name,
                                         grace_period_seconds=int(grace) if grace is not None else None,
                                         precondition_uid=uid))
        else:
            raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on {res.plural}"
                           + (f"/{sub}" if sub else ""))


class _Handler(_Routes, BaseHTTPRequestHandler):
    """The routes over HTTP/1.1 on a socket."""

    protocol_version = "HTTP/1.1"
    # http.server writes headers and body separately; with Nagle's algorithm on, every response then
    # waits ~40 ms for the client's delayed ACK.
    disable_nagle_algorithm = True
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.verbose:
            super().log_message(format, *args)

    def _send(self, code: int, body: Obj | bytes) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body, separators=(",", ":")).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        return _parse_body(raw)

    def _body_drain(self) -> None:
        # Read an unread request body so the kept-alive connection stays in sync.
        if getattr(self, "_body_read", False):
            return
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self._body_read = True

    def _stream(self, chunks: Iterator[bytes]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        for data in chunks:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
        self.close_connection = True

    def _drop(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.write(b"40\r\n" + DROPPED_BODY)
        self.wfile.flush()
        self.close_connection = True

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")


def _parse_body(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise ApiError(400, "BadRequest", f"request body is not JSON: {exc}") from exc


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], store: Store, *, verbose: bool = False) -> None:
        super().__init__(address, _Handler)
        self.store, self.verbose = store, verbose
        self.stopping = threading.Event()
        self._requests: Counter[str] = Counter()
        self._lock = threading.Lock()

    def count(self, method: str, path: str) -> None:
        """Requests by verb and resource (``GET pods``, ``POST events``): what a pass costs the API server."""
        parts = [p for p in path.split("/") if p]
        parts = parts[2:] if parts[:1] == ["api"] else parts[3:] if parts[:1] == ["apis"] else parts
        if parts[:1] == ["namespaces"] and len(parts) >= 3:
            parts = parts[2:]  # namespaced: /namespaces/NS/RESOURCE[/NAME[/SUBRESOURCE]]
        resource = "/".join(parts[:1] + parts[2:3]) or "/"
        with self._lock:
            self._requests[f"{method} {resource}"] += 1

    def stats(self) -> dict[str, int]:
        with self._lock:
            return dict(self._requests)


STOP_POLL_S = 0.02


class KubeApiServer:
    """The emulator running in a background thread: ``url``, ``store``, ``inject_error``, ``stop``."""

    def __init__(self, *, port: int = 0, store: Store | None = None, verbose: bool = False) -> None:
        self.store = store or Store()
        self._server = _Server(("127.0.0.1", port), self.store, verbose=verbose)
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        # stop() waits for the serving loop to notice the shutdown, which it checks between selects: at the
        # default half second, every emulator a test or a simulated run starts costs up to 0.5 s to stop.
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": STOP_POLL_S},
                                        name="kube-api", daemon=True)

    @property
    def http_server(self) -> _Server:
        """The server whose request handling ``simulator.kube_inprocess`` calls without the socket."""
        return self._server

    def start(self) -> KubeApiServer:
        self._thread.start()
        return self

    def inject_error(self, path_substring: str, status: int, count: int = 1, *, method: str | None = None,
                     query_substring: str | None = None) -> None:
        self.store.inject_error(path_substring, status, count, method=method, query_substring=query_substring)

    def inject_delay(self, path_substring: str, seconds: float, count: int = 1, *, method: str | None = None,
                     query_substring: str | None = None) -> None:
        """The next ``count`` matching requests are answered ``seconds`` late (``Store.inject_delay``)."""
        self.store.inject_delay(path_substring, seconds, count, method=method, query_substring=query_substring)

    def requests(self) -> dict[str, int]:
        """Requests served so far by verb and resource (``GET pods``: 3)."""
        return self._server.stats()

    def stop(self) -> None:
        self._server.stopping.set()
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> KubeApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def client_for(url: str, *, token: str | None = None) -> ApiClient:
    """An official-client ``ApiClient`` pointed at ``url`` (the emulator, or any API server)."""
    config = Configuration(host=url)
    if token:
        config.api_key = {"authorization": token}
        config.api_key_prefix = {"authorization": "Bearer"}
    return ApiClient(configuration=config)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simulator.kube_api", description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=8001, help="port on 127.0.0.1 (0 = any free port)")
    parser.add_argument("--graceful-deletion", action="store_true",
                        help="deleted pods keep a deletionTimestamp instead of vanishing at once")
    parser.add_argument("--verbose", action="store_true", help="log every request")
    args = parser.parse_args(argv)
    server = _Server(("127.0.0.1", args.port), Store(graceful_deletion=args.graceful_deletion),
                     verbose=args.verbose)
    print(f"Kubernetes API emulator on http://127.0.0.1:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.stopping.set()
        server.server_close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
