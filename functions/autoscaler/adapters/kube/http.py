"""``KubeHttp``: the adapter's HTTP transport to the Kubernetes API server, over urllib3.

The adapter reads and writes raw JSON only, so the official ``kubernetes`` client's generated APIs and
models (tens of megabytes, hundreds of milliseconds of imports on every cold start) bought nothing at
run time: this transport keeps what was used (endpoint, TLS verified against the cluster CA, a bearer
token asked for before each request so it can be refreshed) and nothing else. It is thread-safe as its
``urllib3.PoolManager`` is. Tests and tools that already hold an official-client ``ApiClient`` (the
emulator's ``client_for``) get an equivalent transport with ``KubeHttp.from_api_client``.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Callable
from typing import Any, Protocol
from urllib.parse import urlencode

import urllib3

Timeout = float | tuple[float, float]
# One pool per host is plenty: the provisioner runs at most a few requests at once (lifecycle workers).
POOL_MAXSIZE = 16


class _OfficialConfiguration(Protocol):
    host: str
    verify_ssl: bool
    ssl_ca_cert: str | None
    ca_cert_data: str | bytes | None

    def auth_settings(self) -> dict[str, Any]: ...


class OfficialApiClient(Protocol):
    """What ``from_api_client`` reads from an official-client ``ApiClient`` (duck-typed: the Lambda
    bundle does not ship the ``kubernetes`` package)."""

    configuration: Any


class KubeHttp:
    """Requests to one API server. ``token`` is called before each request (``None``: no auth header)."""

    def __init__(self, host: str, *, token: Callable[[], str | None] | None = None, ca_pem: bytes | None = None,
                 verify_tls: bool = True, ca_file: str | None = None) -> None:
        self.host = host.rstrip("/")
        self._token = token
        pool_kw: dict[str, Any] = {"maxsize": POOL_MAXSIZE, "retries": False}
        if self.host.startswith("https"):
            if verify_tls:
                pool_kw["cert_reqs"] = ssl.CERT_REQUIRED
                if ca_pem:
                    pool_kw["ca_cert_data"] = ca_pem.decode()
                if ca_file:
                    pool_kw["ca_certs"] = ca_file
            else:
                pool_kw["cert_reqs"] = ssl.CERT_NONE
        self.pool = urllib3.PoolManager(**pool_kw)

    @classmethod
    def from_api_client(cls, api: OfficialApiClient) -> KubeHttp:
        """The same endpoint, TLS settings and (refreshing) token as an official-client ``ApiClient``."""
        cfg = api.configuration

        def token() -> str | None:
            setting = cfg.auth_settings().get("BearerToken") or {}
            value = setting.get("value")
            return str(value).removeprefix("Bearer ") if value else None

        ca_data = getattr(cfg, "ca_cert_data", None)
        ca_pem = ca_data.encode() if isinstance(ca_data, str) else ca_data
        return cls(str(cfg.host), token=token, ca_pem=ca_pem, verify_tls=bool(cfg.verify_ssl),
                   ca_file=getattr(cfg, "ssl_ca_cert", None))

    def auth_header(self) -> str | None:
        """The ``Authorization`` header the next request carries."""
        token = self._token() if self._token else None
        return f"Bearer {token}" if token else None

    def request(self, method: str, path: str, *, query: list[tuple[str, str]] | None = None,
                headers: dict[str, str] | None = None, body: Any = None,
                timeout: Timeout = 30.0) -> urllib3.BaseHTTPResponse:
        """One request; the response is not preloaded (``read()`` it, or ``stream()`` a watch).
        Transport failures raise ``urllib3.exceptions.HTTPError``."""
        url = self.host + path + (f"?{urlencode(query)}" if query else "")
        all_headers = dict(headers or {})
        auth = self.auth_header()
        if auth:
            all_headers["Authorization"] = auth
        payload = None if body is None else json.dumps(body).encode()
        if payload is not None:
            all_headers.setdefault("Content-Type", "application/json")
        limit = (urllib3.Timeout(connect=timeout[0], read=timeout[1]) if isinstance(timeout, tuple)
                 else urllib3.Timeout(total=timeout))
        return self.pool.request(method, url, body=payload, headers=all_headers, timeout=limit,
                                 preload_content=False, redirect=False)
