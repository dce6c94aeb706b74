"""Shared plumbing for the AWS adapters: the botocore retry configuration, one place where every
API call is counted and every failure is logged with its request id, and a keyed cache with a TTL."""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any, Generic, TypeVar

from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
from botocore.utils import parse_timestamp

from autoscaler.app.ports import (
    THROTTLING_CODES,
    Clock,
    CloudError,
    CloudNotFoundError,
    InsufficientCapacityError,
    ThrottledError,
    UnauthorizedError,
    UncertainOutcomeError,
)
from autoscaler.domain.fleet import CAPACITY_ERROR_CODES

log = logging.getLogger("autoscaler.adapters.aws")
V = TypeVar("V")


class TtlCache(Generic[V]):
    """Values by key, each kept ``ttl`` seconds (on ``clock``'s monotonic time) from when it was put."""

    def __init__(self, *, clock: Clock, ttl: float) -> None:
        self._clock = clock
        self._ttl = ttl
        self._entries: dict[str, tuple[float, V]] = {}
        self._guard = threading.Lock()
        self._loading: dict[str, threading.Lock] = {}

    def get_or_load(self, key: str, load: Callable[[], V]) -> V:
        """The cached value, or what ``load()`` returns, loaded once when threads ask together (a pass's
        parallel launches would otherwise each make the same cold-cache calls). A failed load caches
        nothing: the next caller tries again."""
        value = self.get(key)
        if value is not None:
            return value
        with self._guard:
            lock = self._loading.setdefault(key, threading.Lock())
        with lock:
            value = self.get(key)
            return value if value is not None else self.put(key, load())

    def get(self, key: str) -> V | None:
        entry = self._entries.get(key)
        if entry is None or self._clock.monotonic() - entry[0] >= self._ttl:
            return None
        return entry[1]

    def put(self, key: str, value: V) -> V:
        self._entries[key] = (self._clock.monotonic(), value)
        return value

    def clear(self) -> None:
        self._entries.clear()


# How long a call may wait for AWS's answer. Tests against moto on a busy machine raise it (tests/e2e/conftest.py):
# moto answers in milliseconds when the machine is idle, but a loaded one can stall it past 10 s.
READ_TIMEOUT_SECONDS = 10.0


def client_config(*, max_attempts: int = 5, read_timeout: float | None = None) -> Config:
    """Adaptive retries (client-side rate limiting on throttles), bounded so a Lambda never spends its
    whole minute retrying one call."""
    return Config(
        retries={"mode": "adaptive", "max_attempts": max_attempts},
        connect_timeout=5,
        read_timeout=READ_TIMEOUT_SECONDS if read_timeout is None else read_timeout,
        # A burst's launch groups run up to 64 calls at once on one client (app/provisioner.py LAUNCH_THREADS):
        # keep their connections.
        max_pool_connections=64,
        # botocore checks every request against the service model in Python before sending it; the service
        # checks it again and answers a bad one with ValidationException, which the callers translate as any
        # other error. At a 50k-pod burst that local check was ~30% of the launch's CPU (8,000 claims written
        # twice, 50 CreateFleet requests of hundreds of overrides): measured, benchmarks/provisioner_pass.py.
        parameter_validation=False,
    )


def fast_timestamp(value: str) -> datetime:
    """botocore's response timestamps, ISO 8601 as EC2, DynamoDB and SSM send them, parsed by the standard
    library; anything else by botocore's own parser. botocore's default goes through dateutil: 0.2 ms a
    value, which was half the CPU of a DescribeInstances of 2,000 instances (three timestamps each)."""
    try:
        parsed = datetime.fromisoformat(value)
    except (TypeError, ValueError):  # epoch numbers (JSON protocols), RFC 822 dates
        parsed = None
    # A time without a zone keeps botocore's reading of it (it assumes UTC).
    return parsed if parsed is not None and parsed.tzinfo is not None else parse_timestamp(value)


def use_fast_timestamps(session: Any) -> None:
    """Install ``fast_timestamp`` on a boto3 (or botocore) Session: for the clients created after this."""
    core = getattr(session, "_session", session)  # boto3.Session keeps its botocore session there
    if hasattr(core, "get_component"):  # a stand-in session (the simulation's) keeps botocore's parser
        core.get_component("response_parser_factory").set_parser_defaults(timestamp_parser=fast_timestamp)


# Codes by which AWS says the caller may not do this (IAM, an expired or unknown credential).
UNAUTHORIZED_CODES = frozenset({
    "UnauthorizedOperation", "AccessDenied", "AccessDeniedException", "AuthFailure", "UnrecognizedClientException",
    "InvalidClientTokenId", "ExpiredToken", "ExpiredTokenException", "SignatureDoesNotMatch",
})
# Codes naming a missing resource that do not follow the ``*.NotFound`` / ``*NotFoundException`` pattern.
NOT_FOUND_CODES = frozenset({"NoSuchEntity", "ParameterNotFound", "ResourceNotFoundException"})


def error_kind(code: str, status: int) -> type[CloudError]:
    """The port error class for AWS's ``code`` and HTTP ``status`` (0: no answer). Throttling is checked
    first: EC2 answers ``RequestLimitExceeded`` with HTTP 503, and a throttled request was never acted on."""
    if code in THROTTLING_CODES or status == 429:
        return ThrottledError
    if code in CAPACITY_ERROR_CODES:
        return InsufficientCapacityError
    if code in UNAUTHORIZED_CODES:
        return UnauthorizedError
    if code.endswith((".NotFound", "NotFoundException")) or code in NOT_FOUND_CODES:
        return CloudNotFoundError
    if status >= 500 or status == 0:
        return UncertainOutcomeError
    return CloudError


def cloud_error(operation: str, exc: ClientError | BotoCoreError) -> CloudError:
    """The one translation of SDK exceptions into the port's ``CloudError`` classes (``error_kind``)."""
    if isinstance(exc, ClientError):
        err = exc.response.get("Error", {})
        meta = exc.response.get("ResponseMetadata", {})
        code, status = str(err.get("Code", "")), int(meta.get("HTTPStatusCode") or 0)
        return error_kind(code, status)(f"{operation}: {code}: {err.get('Message', exc)}", operation=operation,
                                        code=code, status=status, request_id=str(meta.get("RequestId", "")))
    # No answer at all (a connection or read failure): the request may have reached AWS.
    return UncertainOutcomeError(f"{operation}: {type(exc).__name__}: {exc}", operation=operation,
                                 code=type(exc).__name__)


def _log_failure(exc: CloudError) -> None:
    log.warning(
        "AWS call failed: %s %s: %s (request id %s)", exc.operation, exc.code, exc, exc.request_id or "?",
        extra={"operation": exc.operation, "error_code": exc.code, "request_id": exc.request_id},
    )


class Caller:
    """Calls one boto3 client, counting calls per operation (``calls``) and logging failures."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.calls: Counter[str] = Counter()

    def __call__(self, operation: str, *, expected_errors: tuple[str, ...] = (), **params: Any) -> dict[str, Any]:
        """Call ``operation``; raises ``CloudError``. ``expected_errors`` are codes the caller handles
        (not logged as failures)."""
        self.calls[operation] += 1
        try:
            result: dict[str, Any] = getattr(self.client, operation)(**params)
        except (ClientError, BotoCoreError) as exc:
            error = cloud_error(operation, exc)
            if error.code not in expected_errors:
                _log_failure(error)
            raise error from exc
        return result

    def pages(self, operation: str, **params: Any) -> Iterator[dict[str, Any]]:
        """Every page of a paginated operation; each page is one counted call."""
        paginator = self.client.get_paginator(operation)
        iterator = iter(paginator.paginate(**params))
        while True:
            self.calls[operation] += 1
            try:
                page = next(iterator)
            except StopIteration:
                self.calls[operation] -= 1  # the paginator made no request for the end
                return
            except (ClientError, BotoCoreError) as exc:
                error = cloud_error(operation, exc)
                _log_failure(error)
                raise error from exc
            yield page

    @property
    def total(self) -> int:
        return sum(self.calls.values())
