"""moto as a server on 127.0.0.1, applying one request at a time.

moto's backends are not thread-safe: concurrent CreateFleet or TransactWriteItems requests (a pass
launches up to 32 node groups at once) are sometimes answered with HTTP 500 or leave its state half
updated. AWS isolates such requests, so a stand-in that fails them at random would be less reliable
than the service and fail launches the product gets right. The HTTP server still accepts connections
concurrently; only the application of each request to moto's state is serialised.
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


class SerialMotoServer(ThreadedMotoServer):
    """``ThreadedMotoServer`` whose requests reach moto's backends one at a time."""

    def _server_entry(self) -> None:
        app = _Serial(DomainDispatcherApplication(create_backend_app))
        self._server = make_server(self._ip_address, self._port, app, True, request_handler=MotoRequestHandler)
        self._server_ready_event.set()
        self._server.serve_forever(poll_interval=0.02)  # stop() waits for a poll: 0.5 s by default
