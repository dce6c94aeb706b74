"""EC2's CreateFleet client-token idempotency, which moto lacks, supplied at the boto3 boundary.

Real EC2 answers a CreateFleet whose ``ClientToken`` it has seen before with the *same* response
(the same instances: nothing new is launched), and a seen token with other parameters with
``IdempotentParameterMismatch``. moto launches again on every request, which would let a test double
forgive exactly the double launch the token exists to prevent. ``ClientTokens`` makes the stand-in
as strict as EC2: install it on a boto3 Session (before creating clients) or on one client.

It works per HTTP send, below botocore's retries: the first answer to a token is kept (``needs-retry``
sees every answer before botocore decides to resend) and every later send of that token is answered
from it (``before-send``), exactly as EC2 would.

The same stand-in serves both ways tests reach moto. Against the moto *server* an answered send never
leaves the process. In-process moto (``mock_aws``) is itself a ``before-send`` handler, and botocore calls
every handler of that event (it only keeps the first answer), so moto would still launch the replayed
request and only its answer would be dropped. ``install`` therefore puts itself in front of moto's
handler on those events: moto sees a CreateFleet only when EC2 would act on it.

``lose_responses(n)`` injects the fault the token protects against: the next ``n`` CreateFleet
answers are lost *after* EC2 acted. A lost answer is a read timeout: botocore resends, and once its
attempts are used up (``max_sends``) the caller gets ``ReadTimeoutError``.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

from botocore.awsrequest import AWSResponse
from botocore.exceptions import ReadTimeoutError

_MISMATCH = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>IdempotentParameterMismatch'
             b"</Code><Message>The client token you provided is associated with a resource that is already "
             b"deleted or has different parameters.</Message></Error></Errors><RequestID>stand-in</RequestID>"
             b"</Response>")


class _Raw:
    """Just enough of urllib3's response for AWSResponse.content."""

    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, *_: Any, **__: Any) -> Iterator[bytes]:
        yield self._body


def _params(body: Any) -> list[tuple[str, str]]:
    """The query-protocol parameters: a dict before serialisation (``request_dict``), bytes after."""
    if isinstance(body, dict):
        return [(str(k), str(v)) for k, v in body.items()]
    text = body.decode() if isinstance(body, bytes) else str(body or "")
    return parse_qsl(text, keep_blank_values=True)


@dataclass
class ClientTokens:
    """Token -> (fingerprint of the other parameters, EC2's first answer)."""

    answers: dict[str, tuple[str, AWSResponse]] = field(default_factory=dict)
    replayed: int = 0
    mismatched: int = 0
    sends: int = 0
    max_sends: int = 6  # the product's botocore config: max_attempts=5 retries after the first send
    _lose: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    # The send this thread's ``before-send`` answered, for the moto handler behind it (one emit, one thread).
    _answered: threading.local = field(default_factory=threading.local)

    def install(self, events: Any) -> ClientTokens:
        """``events``: a boto3 Session's or a client's ``.events`` / ``.meta.events`` (a Session's before
        its clients are created: a client copies its session's handlers)."""
        events.register_first("before-send.ec2.CreateFleet", self._before_send)
        events.register_first("needs-retry.ec2.CreateFleet", self._keep_answer)
        events.register("needs-retry.ec2.CreateFleet", self._maybe_lose)
        self._front_moto(events)
        return self

    def _front_moto(self, events: Any) -> None:
        """Replace in-process moto's ``before-send`` handler on ``events`` by one that skips the sends this
        stand-in answered. Without moto loaded (or against the moto server, where its handler is disabled
        and answers nothing) the wrapper only passes the call on."""
        try:
            from moto.core.models import botocore_stubber  # noqa: PLC0415 - moto is a test dependency
        except ImportError:
            return
        events.unregister("before-send", botocore_stubber)

        def moto_unless_answered(request: Any, **kwargs: Any) -> Any:
            if getattr(self._answered, "request", None) is request:
                self._answered.request = None
                return None  # answered from the token's first answer: EC2 does not act again
            return botocore_stubber(request=request, **kwargs)

        events.register("before-send", moto_unless_answered, unique_id=f"client-tokens-moto-{id(self)}")

    def lose_responses(self, count: int) -> None:
        """Lose the next ``count`` CreateFleet answers after EC2 acted on them."""
        with self._lock:
            self._lose = count

    @staticmethod
    def _split(body: Any) -> tuple[str, str]:
        params = _params(body)
        token = next((v for k, v in params if k == "ClientToken"), "")
        rest = "&".join(f"{k}={v}" for k, v in sorted(params) if k != "ClientToken")
        return token, hashlib.sha256(rest.encode()).hexdigest()

    def _before_send(self, request: Any, **_: Any) -> AWSResponse | None:
        token, fingerprint = self._split(request.body)
        self._answered.request = None
        with self._lock:
            self.sends += 1
            seen = self.answers.get(token) if token else None
        if seen is None:
            return None  # the first send of this token: EC2 (moto) acts on it
        self._answered.request = request
        if seen[0] != fingerprint:
            with self._lock:
                self.mismatched += 1
            return AWSResponse(request.url, 400, {"Content-Type": "text/xml"}, _Raw(_MISMATCH))
        with self._lock:
            self.replayed += 1
        return seen[1]

    def _keep_answer(self, request_dict: dict[str, Any], response: Any = None, **_: Any) -> None:
        if not response:
            return
        http = response[0]
        token, fingerprint = self._split(request_dict.get("body"))
        if token and http is not None and http.status_code == 200:
            with self._lock:
                self.answers.setdefault(token, (fingerprint, http))

    def _maybe_lose(self, attempts: int, response: Any = None, **_: Any) -> int | None:
        with self._lock:
            if self._lose <= 0 or not response or response[0] is None or response[0].status_code != 200:
                return None
            self._lose -= 1
        if attempts >= self.max_sends:  # botocore would give up here: the caller sees the timeout
            raise ReadTimeoutError(endpoint_url="https://ec2.amazonaws.com (stand-in: answer lost)")
        return 0  # a lost answer is a read timeout, which botocore retries: resend at once
