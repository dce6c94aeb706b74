"""A warm, watch-fed cache of the cluster's pods and nodes, kept for the life of a Lambda container.

Karpenter never lists the cluster per pass: informers list once, then apply the watch. This does the same
for the provisioner: the first read of a collection lists it (page by page, parsed), later reads catch up
with one watch request from the last resourceVersion (ADDED / MODIFIED / DELETED applied to the parsed
objects, keyed by namespace and name; BOOKMARK moves the version), so a warm pass costs what changed, not
the cluster. 410 Gone, an ERROR event or a stream that keeps breaking lists again, as client-go's reflector
does. Only parsed objects are kept, never raw JSON; a list (the periodic resync) keeps the held objects whose
resourceVersion is unchanged instead of parsing them again.

How current a read must be (``docs/provisioner.md``, "The warm cluster cache"): three rules, three windows.
- ``catch_up()`` (the rule until another is set): any invocation without a marker (a scheduled pass, a
  replacement request, every disruption pass). The first read of each collection after it catches up until
  the stream has been quiet for ``quiet_seconds``, and lists when it is not quiet within ``cap_seconds``;
  later reads catch up likewise and keep what arrived within the cap. A collection never listed, or listed
  ``resync_seconds`` ago or more, lists: the periodic resync.
- ``expect(version)``: a watcher's wake-up names the newest pod resourceVersion of its batch; pods catch up
  until an event (or bookmark) at or past it has been applied. Not reached within ``cap_seconds``, or a
  version that is not an integer: list again. Nodes are read as after ``catch_up()``'s first read.
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
    # A stream with no event for this long has delivered the backlog (a catch-up is then as current as a
    # list taken at that moment).
    quiet_seconds: float = 0.05
    # The longest one read waits for its stream: to go quiet, or to reach a marker.
    cap_seconds: float = 2.0
    # A pass trusts its incremental state for at most this long after the collection's last list
    # (docs/provisioner.md, "The warm cluster cache": why 5 minutes).
    resync_seconds: float = 300.0


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


def _version(obj: Raw) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _key(obj: Raw) -> Key:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


class _Collection(Generic[T]):
    """One collection's parsed objects and the resourceVersion they are current to."""

    def __init__(self, path: str, parse: Callable[[Raw], T], key: Callable[[T], Key]) -> None:
        self.path, self.parse, self.key = path, parse, key
        self.items: dict[Key, T] = {}
        self.versions: dict[Key, str] = {}  # each held object's resourceVersion
        self.version = ""
        self.primed = False
        self.stale = True  # the next read lists
        self.strict = False  # the next read must go quiet within the catch-up cap, or it lists
        self.listed_at: float | None = None  # wall clock: a frozen Lambda container's monotonic clock may stop
        self.ordered = True

    def apply(self, event: Raw) -> None:
        kind, obj = event.get("type"), event.get("object") or {}
        self.version = str((obj.get("metadata") or {}).get("resourceVersion") or self.version)
        if kind in ("ADDED", "MODIFIED"):
            key = _key(obj)
            self.ordered = self.ordered and key in self.items
            self.items[key] = self.parse(obj)
            self.versions[key] = _version(obj)
        elif kind == "DELETED":
            self.items.pop(_key(obj), None)
            self.versions.pop(_key(obj), None)

    def values(self) -> list[T]:
        if not self.ordered:
            self.items = dict(sorted(self.items.items()))
            self.ordered = True
        return list(self.items.values())


Mode = Literal["marker", "catch-up", "list"]


class ClusterCache:
    """Pods and nodes for ``KubeCluster.pods()`` / ``nodes()`` (unfiltered reads only). Thread-safe."""

    def __init__(self, source: WatchSource, *, clock: Clock, settings: CacheSettings | None = None) -> None:
        self._source, self._clock = source, clock
        self.settings = settings or CacheSettings()
        self.stats = CacheStats()
        self._pods: _Collection[Pod] = _Collection("/api/v1/pods", pod_from_dict, lambda p: (p.namespace, p.name))
        self._nodes: _Collection[Node] = _Collection("/api/v1/nodes", node_from_dict, lambda n: ("", n.name))
        self._mode: Mode = "catch-up"
        self._marker = ""
        self._lock = threading.RLock()

    # ----- what the next reads must see --------------------------------------------------------------
    def expect(self, pods_version: str) -> None:
        """Pods must include every change up to ``pods_version`` (the watcher's wake-up)."""
        with self._lock:
            self._mode, self._marker = "marker", pods_version

    def catch_up(self) -> None:
        """The next read of each collection catches up until quiet, as current as a list taken when the stream
        went quiet; it lists instead when the collection's last list is ``resync_seconds`` old (or was never
        made) or the stream is not quiet within ``cap_seconds``. Later reads catch up until quiet."""
        with self._lock:
            self._mode, self._marker = "catch-up", ""
            now = self._clock.now()
            for col in (self._pods, self._nodes):
                age = None if col.listed_at is None else now - col.listed_at
                # A clock that went backwards proves nothing about the age: list.
                col.stale = col.stale or age is None or not 0 <= age < self.settings.resync_seconds
                col.strict = True

    def list_always(self) -> None:
        with self._lock:
            self._mode, self._marker = "list", ""

    @property
    def pods_version(self) -> str:
        return self._pods.version

    @property
    def rule(self) -> str:
        """The current rule, for logs and tests: ``marker <version>``, ``catch-up`` or ``list``."""
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
                                  f"{self.settings.cap_seconds:g} s")
        else:
            strict, col.strict = col.strict, False
            if not self._catch_up(col, until=None, strict=strict):
                self._relist(col, f"the watch could not resume, or was not quiet within "
                                  f"{self.settings.cap_seconds:g} s" if strict else
                                  "the watch could not resume")
        return col.values()

    def _list(self, col: _Collection[T]) -> None:
        # An object whose resourceVersion is the one already held is that object, unchanged (the API server
        # gives every write a new version): it is kept, not parsed again, so a resync parses what changed.
        # Only the changed objects exist twice while the list runs.
        held, held_versions = col.items, col.versions
        col.items, col.versions, col.primed = {}, {}, False
        seen: dict[Key, str] = {}

        def parse(raw: Raw) -> T:
            key, version = _key(raw), _version(raw)
            seen[key] = version
            kept = held.get(key)
            if kept is not None and version and held_versions.get(key) == version:
                return kept
            return col.parse(raw)

        items, version = self._source.list_parsed(col.path, parse)
        col.items = {col.key(item): item for item in items}
        col.versions = {key: seen.get(key, "") for key in col.items}
        col.version, col.primed, col.stale, col.ordered = version, True, False, True
        col.strict, col.listed_at = False, self._clock.now()
        self.stats.lists[col.path] += 1

    def _relist(self, col: _Collection[T], reason: str) -> None:
        self.stats.relists[reason] += 1
        if self.stats.relists[reason] == 1:
            log.warning("%s cache: listing again: %s", col.path, reason)
        self._list(col)

    def _catch_up(self, col: _Collection[T], *, until: int | None, strict: bool = False) -> bool:
        """Apply the watch from the collection's version: until ``until`` is reached, else until the stream
        is quiet. False when the cache must list again (410 Gone, an error, a marker not reached in time,
        ``strict``: a stream not quiet within ``cap_seconds``)."""
        s = self.settings
        deadline = self._clock.monotonic() + s.cap_seconds
        resumes = streams = 0
        capped = False
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
                        capped = True
                        break
            except ClusterError as exc:
                if exc.status == 410 or not exc.retryable or resumes >= _RESUMES:
                    log.info("%s cache: watch from %s failed: %s", col.path, col.version, exc)
                    return False
                resumes += 1  # a broken stream: resume from the last event applied
                continue
            if until is None:
                # Quiet; or capped, where a pass's later reads keep what arrived so far and its first read
                # (strict) lists: it cannot tell the backlog it owes from changes still arriving.
                return not (strict and capped)
        return until is None and not strict
