"""Karpenter's batching window for pending pods (``BATCH_IDLE_DURATION`` / ``BATCH_MAX_DURATION``): a batch
closes once this long passes without a new pod, or this long after its first. Used by watch mode
(``app/watch.py``) and the watcher function (``app/pod_watcher.py``)."""

from __future__ import annotations

BATCH_IDLE_SECONDS = 1.0
BATCH_MAX_SECONDS = 10.0
