"""moto as a server on 127.0.0.1, applying one request at a time.

moto's backends are not thread-safe: concurrent CreateFleet or TransactWriteItems requests (a pass
launches up to 32 node groups at once) are sometimes answered with HTTP 500 or leave its state half
updated. AWS isolates such requests, so a stand-in that fails them at random would be less reliable
than the service and fail launches the product gets right. The HTTP server still accepts connections
concurrently; only the application of each request to moto's state is serialised.

Connections are kept alive (HTTP/1.1) and each host's backend is looked up once: per request, a new
connection (a socket and a server thread) and moto's lookup (it lists its package directory, hundreds of
stat calls) cost more CPU than most of the requests a simulation makes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from moto.moto_server.threaded_moto_server import ThreadedMotoServer
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import make_server

# Held while a request is applied to moto's state; in-process readers of that state (the simulation's
# DescribeInstances stand-in, simulator/sim/describe.py) take it too.
MOTO_LOCK = threading.Lock()


class _Serial:
    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self._app = app
        self._lock = MOTO_LOCK

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        with self._lock:
            return list(self._app(environ, start_response))  # the whole body, produced under the lock


class _Dispatcher(DomainDispatcherApplication):
    """moto's dispatcher, remembering the backend of each host it has seen (the answer depends on the host
    and moto's installed modules only)."""

    def __init__(self, create_app: Callable[..., Any]) -> None:
        super().__init__(create_app)
        self._backends: dict[str | None, Any] = {}

    def get_backend_for_host(self, host: str | None) -> Any:
        if host not in self._backends:
            self._backends[host] = super().get_backend_for_host(host)
        return self._backends[host]


class _KeepAlive(MotoRequestHandler):
    """moto's request handler, keeping a connection open for the client's next request (werkzeug answers
    HTTP/1.0 and closes by default)."""

    protocol_version = "HTTP/1.1"


class SerialMotoServer(ThreadedMotoServer):
    """``ThreadedMotoServer`` whose requests reach moto's backends one at a time."""

    def _server_entry(self) -> None:
        app = _Serial(_Dispatcher(create_backend_app))
        self._server = make_server(self._ip_address, self._port, app, True, request_handler=_KeepAlive)
        self._server_ready_event.set()
        self._server.serve_forever(poll_interval=0.02)  # stop() waits for a poll: 0.5 s by default
