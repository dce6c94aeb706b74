"""Helpers for reading the Kubernetes API's large answers: a pause of the cyclic GC while a list is
parsed, and the newline-delimited JSON events of a watch stream."""

from __future__ import annotations

import gc
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import urllib3
from kubernetes.client import ApiClient
from kubernetes.client.rest import RESTResponse


class _GcPauses:
    """The pauses in progress, across threads. The cyclic GC's switch is one per process, so a list finishing
    on one thread must not switch it back on under another thread's list: the gather lists the small
    collections on a worker thread while the pods are listed, and a plain disable/enable pair there left the
    pod list with the GC on (measured: the lean decode of a 2,000-pod page at 0.14 s of CPU instead of 0.03 s)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count = 0
        self._resume = False  # whether the GC was on when the first pause in progress began

    def begin(self) -> None:
        with self._lock:
            if self._count == 0:
                self._resume = gc.isenabled()
                gc.disable()
            self._count += 1

    def end(self) -> None:
        with self._lock:
            self._count -= 1
            if self._count == 0 and self._resume:
                gc.enable()


_PAUSES = _GcPauses()


@contextmanager
def gc_paused() -> Iterator[None]:
    """Parsing a large list allocates millions of objects that all stay alive, so every cyclic-GC
    pass is wasted work (measured: 5.6 s -> 2.3 s for 50,000 pods). Pause it for the list only: the GC comes
    back on when the last pause in progress (on any thread) ends, and only if it was on when the first began."""
    _PAUSES.begin()
    try:
        yield
    finally:
        _PAUSES.end()


def watch_events(raw: Any) -> Iterator[dict[str, Any]]:
    """Newline-delimited JSON events from a streaming urllib3 response."""
    buf = b""
    for chunk in raw.stream(65536, decode_content=True):
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            if line.strip():
                yield json.loads(line)
    if buf.strip():
        yield json.loads(buf)


def open_stream(api: ApiClient, path: str, *, query: list[tuple[str, str]], connect: float, header: float,
                quiet: float | None = None) -> Any:
    """GET ``path`` as a stream, without urllib3's retries (the client's pool retries a read timeout while
    waiting for the header, which would multiply the wait). A RESTResponse, as ``call_api`` returns.

    ``header`` bounds the wait for the response header; ``quiet`` then becomes the socket's read timeout, so
    a catch-up's quiet window applies between events only: kube-apiserver answers a watch's header as soon
    as the watch is established, and a header a slow or loaded server sends late is not a quiet stream."""
    method, url, headers, _, _ = api.param_serialize(method="GET", resource_path=path, query_params=query,
                                                     header_params={"Accept": "application/json"},
                                                     auth_settings=["BearerToken"])
    raw = api.rest_client.pool_manager.request(method, url, headers=headers, preload_content=False, retries=False,
                                               timeout=urllib3.Timeout(connect=connect, read=header))
    sock = getattr(getattr(raw, "connection", None), "sock", None)
    if quiet is not None and sock is not None:  # None: no socket (an in-process transport)
        sock.settimeout(quiet)  # urllib3 sets it again when it reuses the connection
    return RESTResponse(raw)
