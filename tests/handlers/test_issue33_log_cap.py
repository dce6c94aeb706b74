"""Issue 33 item 16: no log line beyond a bound (CloudWatch Logs refuses events over 256 KB), and a cut
line says how much it lost."""

from __future__ import annotations

import io
import json
import logging

from aws_lambda_powertools import Logger

from autoscaler.handlers.observability import MAX_LOG_LINE_CHARS, LogLineCap


def test_item16_every_log_line_is_capped_with_a_counted_truncation() -> None:
    # Given the handlers' structured logger and an app module's plain logger, both capped
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    structured = Logger(service="item16", logger_handler=handler)
    cap = LogLineCap()
    handler.addFilter(cap)
    plain_buf = io.StringIO()
    plain_handler = logging.StreamHandler(plain_buf)
    plain_handler.addFilter(cap)
    plain = logging.getLogger("autoscaler.tests.item16")
    plain.addHandler(plain_handler)
    plain.propagate = False
    try:
        # When a 2 MB message and a 2 MB field are logged
        structured.warning("malformed: " + "i" * 2_000_000, extra={"error": "e" * 2_000_000, "messageId": "m-1"})
        plain.warning("instance %s", "i-" + "0" * 2_000_000)
    finally:
        plain.removeHandler(plain_handler)
    # Then each line is at most the cap, still JSON where it was, and says what was cut
    line = buf.getvalue().strip()
    assert len(line.encode()) <= MAX_LOG_LINE_CHARS
    doc = json.loads(line)
    assert doc["messageId"] == "m-1" and "truncated" in doc["message"] and "truncated" in doc["error"]
    assert "characters truncated" in doc["message"]
    text = plain_buf.getvalue().strip()
    assert len(text.encode()) <= MAX_LOG_LINE_CHARS and "characters truncated" in text
    assert cap.truncated == 2


def test_item16_the_cap_is_on_every_handler_the_functions_log_through() -> None:
    # The Lambda runtime's own handler on the root logger carries the app modules' lines
    from autoscaler.handlers import observability
    runtime = logging.StreamHandler(io.StringIO())
    logging.getLogger().addHandler(runtime)
    try:
        observability.install_log_cap()
        observability.install_log_cap()  # once per container, but idempotent
        handlers = [*observability.logger._logger.handlers, runtime]
        assert all(sum(isinstance(f, LogLineCap) for f in h.filters) == 1 for h in handlers)
    finally:
        logging.getLogger().removeHandler(runtime)
