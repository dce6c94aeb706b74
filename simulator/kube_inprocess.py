"""The Kubernetes API emulator without the socket: an in-process transport for the official client.

The simulation's handlers keep making their real requests through the ``kubernetes`` client's
``ApiClient`` (the same URLs, query strings, headers and JSON bodies); :func:`install` replaces that
client's ``rest_client.pool_manager`` with :class:`InProcessPool`, whose ``request()`` hands the request
to the emulator's own request handling (``kube_api._Routes``) and answers with a real
``urllib3.HTTPResponse`` holding the same status, headers and bytes the HTTP server would have sent. What
goes away is the socket, http.server's parsing and thread hand-off and urllib3's connection pool: the
part of a 5,000-pod list that is transport, not API. A watch answers lazily, one chunk per event as the
HTTP server would stream it; an injected dropped connection ends in urllib3's ``ProtocolError``, as a
socket cut mid-chunk does. The HTTP server keeps running for everything else (kubectl, the tests that
talk HTTP). ``tests/scenarios/test_kube_inprocess.py`` shows both transports answer alike.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import urllib3
from kubernetes.client import ApiClient
from urllib3.exceptions import ProtocolError
from urllib3.response import HTTPResponse

from simulator.kube_api import DROPPED_BODY, KubeApiServer, _parse_body, _Routes, _Server


class _ChunkReader(io.RawIOBase):
    """A response body read from an iterator of chunks; ``broken`` ends it as a cut connection. The
    current chunk is read through an offset: slicing off what was read would copy a 5 MB list once per
    8 KB read."""

    def __init__(self, chunks: Iterator[bytes], *, broken: bool = False) -> None:
        self._chunks, self._broken = chunks, broken
        self._data, self._at = b"", 0

    def readable(self) -> bool:
        return True

    def next_chunk(self) -> bytes:
        """The rest of the current chunk, else the next one (b"" at the end)."""
        if self._at < len(self._data):
            data = self._data[self._at:] if self._at else self._data
            self._data, self._at = b"", 0
            return data
        data = next(self._chunks, b"")
        if not data and self._broken:
            raise ProtocolError("Connection broken: the emulator dropped the connection mid-chunk")
        return data

    def readinto(self, buffer: Any) -> int:
        if self._at >= len(self._data):
            self._data, self._at = self.next_chunk(), 0
        n = min(len(buffer), len(self._data) - self._at)
        buffer[:n] = memoryview(self._data)[self._at:self._at + n]
        self._at += n
        return n

    def readall(self) -> bytes:
        parts = []
        while data := self.next_chunk():
            parts.append(data)
        return parts[0] if len(parts) == 1 else b"".join(parts)


class _Response(HTTPResponse):
    """urllib3's response over a chunk reader: ``stream()`` yields each chunk as it comes (as urllib3's
    ``read_chunked`` does for the HTTP server's chunked watch), ``read()`` / ``data`` read it all."""

    def __init__(self, reader: _ChunkReader, **kwargs: Any) -> None:
        super().__init__(body=reader, preload_content=False, decode_content=True, **kwargs)
        self._reader = reader

    def stream(self, amt: int | None = 2 ** 16, decode_content: bool | None = None) -> Iterator[bytes]:
        while data := self._reader.next_chunk():
            yield data


class _Exchange(_Routes):
    """One request handled in-process: what the HTTP handler would have written, kept as a response."""

    def __init__(self, server: _Server, *, path: str, headers: urllib3.HTTPHeaderDict, body: bytes) -> None:
        self.server, self.path, self.headers, self._raw = server, path, headers, body
        self._body_read = False
        self.status, self.chunks, self.chunked, self.broken = 0, iter(()), False, False

    def _send(self, code: int, body: dict[str, Any] | bytes) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body, separators=(",", ":")).encode()
        self.status, self.chunks = code, iter((data,))
        self.length = len(data)

    def _body(self) -> Any:
        return _parse_body(self._raw)

    def _body_drain(self) -> None:
        self._body_read = True

    def _stream(self, chunks: Iterator[bytes]) -> None:
        self.status, self.chunks, self.chunked = 200, chunks, True

    def _drop(self) -> None:
        self.status, self.chunks, self.chunked, self.broken = 200, iter((DROPPED_BODY,)), True, True

    def response(self, method: str, url: str) -> HTTPResponse:
        headers = urllib3.HTTPHeaderDict({"Content-Type": "application/json"})
        if self.chunked:
            headers["Transfer-Encoding"] = "chunked"
        else:
            headers["Content-Length"] = str(self.length)
        status = HTTPStatus(self.status) if self.status in HTTPStatus._value2member_map_ else None
        return _Response(_ChunkReader(self.chunks, broken=self.broken), headers=headers, status=self.status,
                         reason=status.phrase if status else "", request_method=method, request_url=url)


class InProcessPool:
    """What ``RESTClientObject`` needs of a ``urllib3.PoolManager``: ``request()`` and ``clear()``."""

    def __init__(self, server: _Server) -> None:
        self._server = server

    def request(self, method: str, url: str, *, body: bytes | str | None = None, fields: Any = None,
                headers: Any = None, timeout: Any = None, **_: Any) -> HTTPResponse:
        if fields:
            raise ValueError(f"{method} {url}: form fields are not sent by the autoscaler's requests")
        parts = urlsplit(url)
        sent = urllib3.HTTPHeaderDict(dict(headers or {}))
        sent.setdefault("Host", parts.netloc)
        raw = body.encode() if isinstance(body, str) else (body or b"")
        query = _backlog_only(parts.query) if _reads_until_quiet(parts.query, timeout) else parts.query
        path = parts.path + (f"?{query}" if query else "")
        exchange = _Exchange(self._server, path=path, headers=sent, body=raw)
        exchange._dispatch(method.upper())
        return exchange.response(method.upper(), url)

    def clear(self) -> None:
        """Nothing pooled: no connection to close."""


def _reads_until_quiet(query: str, timeout: Any) -> bool:
    """A watch whose read timeout (its wait for the header) is not longer than its ``timeoutSeconds``: the
    caller reads the backlog and stops at the first quiet moment (the warm cluster cache catching up,
    adapters/kube/informer.py, which sets its quiet window on the socket once the header is in; a watch
    read to its end waits longer than the server's timeout)."""
    if isinstance(timeout, urllib3.Timeout):
        timer = timeout.clone()
        timer.start_connect()  # read_timeout is only defined once a connection has started
        read = timer.read_timeout
    else:
        read = timeout
    if not isinstance(read, int | float) or "watch=1" not in query.split("&"):
        return False
    seconds = dict(parse_qsl(query)).get("timeoutSeconds")
    return seconds is None or read <= float(seconds)


def _backlog_only(query: str) -> str:
    """In-process nothing can happen while the caller waits for quiet (the simulation's clock stands still
    during a handler's call), so such a watch is answered with its backlog and ends, as the same watch
    over HTTP would once its quiet window passed (without the wall-clock wait, or the stand-in waiting for
    the server's ``timeoutSeconds`` because it has no read timeout)."""
    pairs = [(k, v) for k, v in parse_qsl(query, keep_blank_values=True) if k != "timeoutSeconds"]
    return urlencode([*pairs, ("timeoutSeconds", "0")])


def install(api: ApiClient, server: KubeApiServer) -> ApiClient:
    """Route ``api``'s requests to ``server``'s emulator in-process (the simulation's clients only)."""
    api.rest_client.pool_manager = InProcessPool(server.http_server)  # type: ignore[assignment]
    return api
