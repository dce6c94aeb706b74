"""Logger, Metrics and Tracer, created once per container and shared by the three handlers, and the
metrics sink that services emit through (Embedded Metric Format via Powertools)."""

from __future__ import annotations

import json
import logging
import threading

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit, single_metric

from autoscaler.metrics_catalog import NAMESPACE, SERVICE_DIMENSION, MetricDef, check_dimensions

# CloudWatch Logs refuses an event over 256 KB, and a line that size is useless to read: every line the
# functions write is cut to this, saying how much was cut (docs/metrics.md).
MAX_LOG_LINE_CHARS = 8192
# What a message and the fields a record carries may take (the rest: level, time, location, service).
_MESSAGE_CHARS = 4096
_FIELDS_CHARS = 3072
_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... [{len(text) - limit:,} characters truncated]"


class LogLineCap(logging.Filter):
    """Cuts a record's message and extra fields so the line stays under ``MAX_LOG_LINE_CHARS``; counts
    the records it cut (``truncated``). A filter on the handler, so it holds for every logger."""

    def __init__(self) -> None:
        super().__init__()
        self.truncated = 0
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        cut = False
        message = record.getMessage()
        if len(message) > _MESSAGE_CHARS:
            record.msg, record.args, cut = _cut(message, _MESSAGE_CHARS), None, True
        left = _FIELDS_CHARS
        for key, value in list(record.__dict__.items()):
            if key in _STANDARD or key.startswith("_"):
                continue
            text = value if isinstance(value, str) else json.dumps(value, default=str)
            if len(text) > left:
                setattr(record, key, _cut(text, max(left, 64)))
                cut = True
            left = max(left - min(len(text), left), 0)
        if record.exc_text and len(record.exc_text) > _FIELDS_CHARS:
            record.exc_text, cut = _cut(record.exc_text, _FIELDS_CHARS), True
        if cut:
            with self._lock:
                self.truncated += 1
        return True


logger = Logger()
metrics = Metrics(namespace=NAMESPACE)
tracer = Tracer()
_CAP = LogLineCap()


def install_log_cap() -> None:
    """Put the cap on the handlers lines leave through: the Powertools logger's and the root logger's
    (the Lambda runtime's, which the app modules' plain loggers reach)."""
    for handler in [*logger._logger.handlers, *logging.getLogger().handlers]:
        if not any(isinstance(f, LogLineCap) for f in handler.filters):
            handler.addFilter(_CAP)


install_log_cap()


def flush_metrics() -> None:
    """Write the metrics gathered so far as EMF now (``log_metrics`` flushes what is left at the end).
    Nothing gathered: nothing written (flushing would warn about an empty document)."""
    if metrics.metric_set:
        metrics.flush_metrics()


class PowertoolsSink:
    """Emits catalogue metrics: plain ones on the shared Metrics object (flushed once per invocation by
    ``log_metrics``), dimensioned ones as their own EMF document so each keeps exactly its dimensions."""

    def __init__(self, shared: Metrics | None = None) -> None:
        self._metrics = shared or metrics

    def emit(self, metric: MetricDef, value: float, **dimensions: str) -> None:
        check_dimensions(metric, dimensions)
        unit = MetricUnit(metric.unit)
        if not dimensions:
            self._metrics.add_metric(name=metric.name, unit=unit, value=value)
            return
        with single_metric(name=metric.name, unit=unit, value=value, namespace=NAMESPACE,
                           default_dimensions=self._metrics.default_dimensions) as one:
            # single_metric does not inherit the service dimension; every catalogue metric carries it.
            service = getattr(self._metrics, "service", None)
            if service:
                one.add_dimension(name=SERVICE_DIMENSION, value=str(service))
            for key, val in dimensions.items():
                one.add_dimension(name=key, value=val)
