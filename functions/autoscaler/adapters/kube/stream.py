"""Helpers for reading the Kubernetes API's large answers: a pause of the cyclic GC while a list is
parsed, and the newline-delimited JSON events of a watch stream."""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import urllib3
from kubernetes.client import ApiClient
from kubernetes.client.rest import RESTResponse


@contextmanager
def gc_paused() -> Iterator[None]:
    """Parsing a large list allocates millions of objects that all stay alive, so every cyclic-GC
    pass is wasted work (measured: 5.6 s -> 2.3 s for 50,000 pods). Pause it for the list only."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


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
