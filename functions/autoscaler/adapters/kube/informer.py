"""A warm, watch-fed cache of the cluster's pods and nodes, kept for the life of a Lambda container.

Karpenter never lists the cluster per pass: informers list once, then apply the watch. This does the same
for the provisioner: the first read of a collection lists it (page by page, parsed), later reads catch up
with one watch request from the last resourceVersion (ADDED / MODIFIED / DELETED applied to the parsed
objects, keyed by namespace and name; BOOKMARK moves the version), so a warm pass costs what changed, not
the cluster. 410 Gone, an ERROR event or a stream that keeps breaking lists again, as client-go's reflector
does. Only parsed objects are kept, never raw JSON.

How current a read must be (``docs/provisioner.md``, "The warm cluster cache"):
- ``expect(version)``: a watcher's wake-up names the newest pod resourceVersion of its batch; pods catch up
  until an event (or bookmark) at or past it has been applied. Not reached within ``marker_cap_seconds``,
  or a version that is not an integer: list again.
- nodes (and pods without a marker, after this invocation's list) catch up until the stream has been quiet
  for ``quiet_seconds``, bounded by ``quiet_cap_seconds``.
- ``resync()``: the next read of each collection lists and refreshes the cache (a scheduled safety pass, a
  replacement request, any invocation without a marker: the periodic resync).
- ``list_always()``: every read lists, as without a cache (watch-mode invocations).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, Protocol, TypeVar

from autoscaler.app.ports import Clock, ClusterError
from autoscaler.domain.models import Node, Pod
from autoscaler.domain.objects import node_from_dict, pod_from_dict

log = logging.getLogger(__name__)
T = TypeVar("T")
Raw = dict[str, Any]
Key = tuple[str, str]  # (namespace, name): the API server's list order
# Broken streams resumed in one catch-up before it gives up and lists; watch requests in one catch-up.
_RESUMES = 3
_STREAMS = 8


class WatchSource(Protocol):
    """What the cache needs from ``KubeCluster``."""

    def list_parsed(self, path: str, parse: Callable[[Raw], T]) -> tuple[list[T], str]: ...

    def watch_raw(self, path: str, *, resource_version: str, timeout_seconds: float,
                  field_selector: str | None = None, quiet_seconds: float | None = None) -> Iterator[Raw]: ...


@dataclass(frozen=True)
class CacheSettings:
    quiet_seconds: float = 0.05
    quiet_cap_seconds: float = 1.0
    marker_cap_seconds: float = 2.0


@dataclass
class CacheStats:
    """What the cache did, for the decision log, tests and benchmarks."""

    lists: Counter[str] = field(default_factory=Counter)  # by collection path
    watches: int = 0
    events: int = 0
    relists: Counter[str] = field(default_factory=Counter)  # by reason


def _int(version: str) -> int | None:
    try:
        return int(version)
    except ValueError:
        return None


def _key(obj: Raw) -> Key:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


class _Collection(Generic[T]):
    """One collection's parsed objects and the resourceVersion they are current to."""

    def __init__(self, path: str, parse: Callable[[Raw], T], key: Callable[[T], Key]) -> None:
        self.path, self.parse, self.key = path, parse, key
        self.items: dict[Key, T] = {}
        self.version = ""
        self.primed = False
        self.stale = True  # the next read lists
        self.ordered = True

    def apply(self, event: Raw) -> None:
        kind, obj = event.get("type"), event.get("object") or {}
        self.version = str((obj.get("metadata") or {}).get("resourceVersion") or self.version)
        if kind in ("ADDED", "MODIFIED"):
            key = _key(obj)
            self.ordered = self.ordered and key in self.items
            self.items[key] = self.parse(obj)
        elif kind == "DELETED":
            self.items.pop(_key(obj), None)

    def values(self) -> list[T]:
        if not self.ordered:
            self.items = dict(sorted(self.items.items()))
            self.ordered = True
        return list(self.items.values())


Mode = Literal["marker", "quiet", "list"]


class ClusterCache:
    """Pods and nodes for ``KubeCluster.pods()`` / ``nodes()`` (unfiltered reads only). Thread-safe."""

    def __init__(self, source: WatchSource, *, clock: Clock, settings: CacheSettings | None = None) -> None:
        self._source, self._clock = source, clock
        self.settings = settings or CacheSettings()
        self.stats = CacheStats()
        self._pods: _Collection[Pod] = _Collection("/api/v1/pods", pod_from_dict, lambda p: (p.namespace, p.name))
        self._nodes: _Collection[Node] = _Collection("/api/v1/nodes", node_from_dict, lambda n: ("", n.name))
        self._mode: Mode = "quiet"
        self._marker = ""
        self._lock = threading.RLock()

    # ----- what the next reads must see --------------------------------------------------------------
    def expect(self, pods_version: str) -> None:
        """Pods must include every change up to ``pods_version`` (the watcher's wake-up)."""
        with self._lock:
            self._mode, self._marker = "marker", pods_version

    def resync(self) -> None:
        """The next read of each collection lists; later ones catch up until quiet."""
        with self._lock:
            self._mode, self._marker = "quiet", ""
            self._pods.stale = self._nodes.stale = True

    def list_always(self) -> None:
        with self._lock:
            self._mode, self._marker = "list", ""

    @property
    def pods_version(self) -> str:
        return self._pods.version

    @property
    def rule(self) -> str:
        """The current rule, for logs and tests: ``marker <version>``, ``quiet`` or ``list``."""
        return f"marker {self._marker}" if self._mode == "marker" else self._mode

    # ----- reads ---------------------------------------------------------------------------------------
    def pods(self) -> list[Pod]:
        with self._lock:
            return self._read(self._pods, marker=self._marker if self._mode == "marker" else "")

    def nodes(self) -> list[Node]:
        with self._lock:
            return self._read(self._nodes, marker="")

    def _read(self, col: _Collection[T], *, marker: str) -> list[T]:
        if self._mode == "list" or col.stale or not col.primed:
            self._list(col)
            return col.values()
        if marker:
            want, have = _int(marker), _int(col.version)
            if want is None or have is None:
                self._relist(col, f"a resourceVersion that is not an integer ({marker!r} / {col.version!r})")
            elif have < want and not self._catch_up(col, until=want):
                self._relist(col, f"resourceVersion {marker} not reached within "
                                  f"{self.settings.marker_cap_seconds:g} s")
        elif not self._catch_up(col, until=None):
            self._relist(col, "the watch could not resume")
        return col.values()

    def _list(self, col: _Collection[T]) -> None:
        col.items, col.primed = {}, False  # the old objects go before the new ones are parsed: one copy at a time
        items, version = self._source.list_parsed(col.path, col.parse)
        col.items = {col.key(item): item for item in items}
        col.version, col.primed, col.stale, col.ordered = version, True, False, True
        self.stats.lists[col.path] += 1

    def _relist(self, col: _Collection[T], reason: str) -> None:
        self.stats.relists[reason] += 1
        if self.stats.relists[reason] == 1:
            log.warning("%s cache: listing again: %s", col.path, reason)
        self._list(col)

    def _catch_up(self, col: _Collection[T], *, until: int | None) -> bool:
        """Apply the watch from the collection's version: until ``until`` is reached, else until the stream
        is quiet. False when the cache must list again (410 Gone, an error, a marker not reached in time)."""
        s = self.settings
        deadline = self._clock.monotonic() + (s.marker_cap_seconds if until is not None else s.quiet_cap_seconds)
        resumes = streams = 0
        # Bounded by requests too: a clock that does not move (a simulation's) must not keep the loop going.
        while (left := deadline - self._clock.monotonic()) > 0 and streams < _STREAMS:
            streams += 1
            self.stats.watches += 1
            try:
                for event in self._source.watch_raw(col.path, resource_version=col.version, timeout_seconds=left,
                                                    quiet_seconds=left if until is not None else s.quiet_seconds):
                    col.apply(event)
                    self.stats.events += 1
                    if until is not None and (_int(col.version) or 0) >= until:
                        return True
                    if self._clock.monotonic() >= deadline:
                        break
            except ClusterError as exc:
                if exc.status == 410 or not exc.retryable or resumes >= _RESUMES:
                    log.info("%s cache: watch from %s failed: %s", col.path, col.version, exc)
                    return False
                resumes += 1  # a broken stream: resume from the last event applied
                continue
            if until is None:
                return True  # quiet (or capped: what arrived so far is applied)
        return until is None
