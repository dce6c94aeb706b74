"""Logger, Metrics and Tracer, created once per container and shared by the three handlers, and the
metrics sink that services emit through (Embedded Metric Format via Powertools)."""

from __future__ import annotations

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit, single_metric

from autoscaler.metrics_catalog import NAMESPACE, SERVICE_DIMENSION, MetricDef, check_dimensions

logger = Logger()
metrics = Metrics(namespace=NAMESPACE)
tracer = Tracer()


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
