"""Reading configuration files safely: size and binary checks before parsing, YAML parsed with the line
of every key and item recorded and duplicate keys reported, and a fast path for large documents (JSON, else
libyaml's event stream built into values in one pass), which reports duplicate keys with their lines too.
Large snapshots are best written as JSON (``autoscaler snapshot`` does): it loads ~4x faster than YAML.

Shared by the cluster file (``config.py``), ``autoscaler validate`` and the snapshot reader. Pure apart
from reading the one file it is given (no AWS or Kubernetes code), so the CDK app can use it.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path as FilePath
from typing import Any

import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from autoscaler.domain.errors import Path, Problem

# A cluster file is a few kilobytes; 5 MB is far beyond any real one and still instant to reject.
MAX_CONFIG_BYTES = 5 * 1024 * 1024
# Snapshots of large clusters are big (50,000 pods is ~100 MB of JSON).
MAX_SNAPSHOT_BYTES = 512 * 1024 * 1024
# Far more than any cluster file or manifest holds; a file of aliases of aliases is refused above it.
MAX_EXPANDED_VALUES = 1_000_000
_MERGE = "tag:yaml.org,2002:merge"
# libyaml's C parser is ~10x faster than the pure-Python one; PyYAML without libyaml falls back.
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_MAX_DEPTH = 200


@dataclass
class Document:
    """One parsed YAML/JSON document, the line (1-based) of each path, and what was wrong reading it."""

    data: Any = None
    lines: dict[Path, int] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)


def read_text(path: str | FilePath, *, max_bytes: int) -> tuple[str | None, list[Problem]]:
    """The file's text, or the problem: missing, too large, binary or not UTF-8. Never raises."""
    p = FilePath(path)
    try:
        size = p.stat().st_size
        if size > max_bytes:
            return None, [Problem(f"the file is {size / 1e6:.1f} MB, over the {max_bytes / 1e6:.0f} MB limit for "
                                  "this kind of file; is it the right file?")]
        raw = p.read_bytes()
    except OSError as exc:
        return None, [Problem(f"cannot read the file: {exc.strerror}")]
    if b"\x00" in raw[:1_000_000]:
        return None, [Problem("the file is binary (it contains NUL bytes), not YAML or JSON text")]
    try:
        return raw.decode("utf-8"), []
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        return None, [Problem(f"the file is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}); "
                              "save it as UTF-8", line=line)]


def _expanded_size(node: Node, memo: dict[int, int]) -> int:
    """How many values the document holds once aliases are expanded (a "billion laughs" file is tiny on
    disk and astronomically large expanded). Depth is already bounded by ``_too_deep``."""
    key = id(node)
    if key in memo:
        return memo[key]
    memo[key] = 1  # a recursive alias counts once
    size = 1
    if isinstance(node, MappingNode):
        size += sum(_expanded_size(k, memo) + _expanded_size(v, memo) for k, v in node.value)
    elif isinstance(node, SequenceNode):
        size += sum(_expanded_size(item, memo) for item in node.value)
    memo[key] = size
    return size


class _Builder:
    """Builds Python values from a composed YAML node tree, recording lines and duplicate keys."""

    def __init__(self, doc: Document) -> None:
        self.doc = doc
        self.constructor = SafeConstructor()

    def build(self, node: Node, path: Path, depth: int = 0) -> Any:
        self.doc.lines.setdefault(path, node.start_mark.line + 1)
        if depth > _MAX_DEPTH:
            self.doc.problems.append(Problem(f"nested more than {_MAX_DEPTH} levels deep", path))
            return None
        if isinstance(node, MappingNode):
            return self._mapping(node, path, depth)
        if isinstance(node, SequenceNode):
            return [self.build(item, (*path, i), depth + 1) for i, item in enumerate(node.value)]
        assert isinstance(node, ScalarNode)
        return self.constructor.construct_object(node, deep=True)

    def _mapping(self, node: MappingNode, path: Path, depth: int) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        first_line: dict[Any, int] = {}
        merged: list[Node] = []
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE:
                merged.append(value_node)
                continue
            if not isinstance(key_node, ScalarNode):
                self.doc.problems.append(Problem("a key must be a plain value, not a list or mapping", path,
                                                 line=key_node.start_mark.line + 1))
                continue
            key = self.constructor.construct_object(key_node)
            line = key_node.start_mark.line + 1
            if key in out:
                self.doc.problems.append(Problem(
                    f"duplicate key {key!r} (first at line {first_line[key]}); YAML keeps only the last one, "
                    "so delete one of them", (*path, key), line=line))
            first_line.setdefault(key, line)
            self.doc.lines[(*path, key)] = line
            out[key] = self.build(value_node, (*path, key), depth + 1)
        for value_node in merged:  # ``<<: *anchor``: explicit keys win over merged ones
            sources = value_node.value if isinstance(value_node, SequenceNode) else [value_node]
            for source in sources:
                value = self.build(source, path, depth + 1)
                if isinstance(value, dict):
                    for key, item in value.items():
                        out.setdefault(key, item)
        return out


def _too_deep(text: str) -> Problem | None:
    """libyaml's composer recurses in C: a hostile file nested thousands deep would crash the process
    rather than raise. The event stream is flat, so the depth is measured on it first."""
    depth = 0
    for event in yaml.parse(text, Loader=_LOADER):
        if isinstance(event, yaml.MappingStartEvent | yaml.SequenceStartEvent):
            depth += 1
            if depth > _MAX_DEPTH:
                mark = event.start_mark
                return Problem(f"nested more than {_MAX_DEPTH} levels deep; no configuration needs that",
                               line=mark.line + 1 if mark is not None else None)
        elif isinstance(event, yaml.MappingEndEvent | yaml.SequenceEndEvent):
            depth -= 1
    return None


def parse_yaml(text: str, *, multi: bool = False) -> list[Document]:
    """Parse YAML (JSON is YAML) keeping lines. One document unless ``multi`` (``---``-separated manifests)."""
    try:
        deep = _too_deep(text)
        if deep is not None:
            return [Document(problems=[deep])]
        nodes: Iterator[Node | None] = iter(yaml.compose_all(text, Loader=_LOADER)) if multi else iter(
            [yaml.compose(text, Loader=_LOADER)])
        docs = []
        for node in nodes:
            doc = Document()
            if node is not None and (size := _expanded_size(node, {})) > MAX_EXPANDED_VALUES:
                doc.problems.append(Problem(f"anchors and aliases expand this document to {size:,} values "
                                            f"(limit {MAX_EXPANDED_VALUES:,}); write the values out",
                                            line=node.start_mark.line + 1))
            elif node is not None:
                doc.data = _Builder(doc).build(node, ())
            docs.append(doc)
        return docs
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        reason = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        line = mark.line + 1 if mark is not None else None
        return [Document(problems=[Problem(f"not valid YAML: {reason}", line=line)])]


class Unusual(Exception):
    """A construct the event builder leaves to PyYAML's own loader (a ``!!set``, several documents...)."""


class DuplicateKey(Exception):
    """A mapping holds a key twice: the caller reads the file again to name every one with its lines."""


def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``' object hook: a key given twice is an error, not silently the last one."""
    mapping = dict(pairs)
    if len(mapping) != len(pairs):
        raise DuplicateKey
    return mapping


class EventBuilder:
    """Builds Python values straight from libyaml's event stream.

    PyYAML's loaders compose a node tree, then construct values from it, resolving every scalar's tag
    in Python: ~2 s per MB even with the C parser, so a 20 MB snapshot took minutes. Snapshots are
    mostly repeated plain scalars, so resolution is cached per distinct text; the rest is one pass over
    the events. Results equal ``yaml.safe_load`` (anchors, aliases, merge keys, explicit tags)."""

    def __init__(self) -> None:
        self.constructor = SafeConstructor()
        self.resolver = yaml.resolver.Resolver()
        self.plain: dict[str, Any] = {}
        self.anchors: dict[str, Any] = {}

    def scalar(self, event: Any) -> Any:
        if not event.style and event.tag in (None, "!") and event.implicit[0]:  # libyaml: plain style is ""
            if event.value == "<<":
                return _MERGE_KEY
            if event.value == "=":  # a key (PyYAML reads it as text) or an error (a value): PyYAML decides
                raise Unusual
            try:
                return self.plain[event.value]
            except KeyError:
                pass
            tag: str = self.resolver.resolve(ScalarNode, event.value, (True, False))  # type: ignore[no-untyped-call]
            value = self._construct(tag, event)
            if not isinstance(value, list | dict | set):
                self.plain[event.value] = value
            return value
        if event.tag in (None, "!", "tag:yaml.org,2002:str"):
            return event.value
        return self._construct(event.tag, event)

    def _construct(self, tag: str, event: Any) -> Any:
        if tag == "tag:yaml.org,2002:str":
            return event.value
        node = ScalarNode(tag, event.value, event.start_mark, event.end_mark, style=event.style)
        return self.constructor.construct_object(node, deep=True)

    def load(self, text: str) -> Any:
        stack: list[Any] = []  # containers being filled
        keys: list[Any] = []  # beside each container: its pending key (mappings)
        root: Any = None
        documents = 0
        scalar_event, alias_event = yaml.ScalarEvent, yaml.AliasEvent
        start_events = (yaml.MappingStartEvent, yaml.SequenceStartEvent)
        end_events = (yaml.MappingEndEvent, yaml.SequenceEndEvent)
        events: Iterator[Any] = yaml.parse(text, Loader=_LOADER)  # the typed Event base lacks the fields
        for event in events:
            kind = type(event)
            if kind is scalar_event:
                value: Any = self.scalar(event)
                if event.anchor:
                    self.anchors[event.anchor] = value
            elif kind is alias_event:
                value = self.anchors[event.anchor]
            elif kind in start_events:
                if event.tag not in (None, "!", _MAP_TAG, _SEQ_TAG):
                    raise Unusual  # !!set, !!omap, ...: rare; PyYAML's own loader handles them
                container: Any = {} if kind is yaml.MappingStartEvent else []
                if event.anchor:
                    self.anchors[event.anchor] = container
                stack.append(container)
                keys.append(_NO_KEY)
                continue
            elif kind in end_events:
                value = stack.pop()
                keys.pop()
                if kind is yaml.MappingEndEvent and _MERGE_KEY in value:
                    value = _merge(value)
            else:
                if kind is yaml.DocumentStartEvent:
                    documents += 1
                    if documents > 1:
                        raise Unusual  # PyYAML reports it as it always has
                continue
            if not stack:
                root = value
                continue
            top = stack[-1]
            if top.__class__ is list:
                top.append(value)
            elif keys[-1] is _NO_KEY:
                keys[-1] = value
            else:
                key = keys[-1]
                try:
                    if key in top and key is not _MERGE_KEY:
                        raise DuplicateKey  # found again, with lines, by ``duplicate_keys``
                    top[key] = value
                except TypeError:  # an unhashable (list or mapping) key: PyYAML reports it
                    raise Unusual from None
                keys[-1] = _NO_KEY
        return root


class DuplicateKeysError(yaml.YAMLError):
    """Keys given twice in one mapping (YAML keeps the last silently): one problem each, with lines."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("; ".join(p.render() for p in problems))
        self.problems = problems


_MAP_TAG, _SEQ_TAG = "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"
_NO_KEY = object()
_MERGE_KEY = "\x00<<merge>>"  # a key no document holds: ``<<`` is merged when its mapping ends


def _merge(mapping: dict[Any, Any]) -> dict[Any, Any]:
    sources = mapping.pop(_MERGE_KEY)
    out: dict[Any, Any] = {}
    for source in reversed(sources if isinstance(sources, list) else [sources]):
        if isinstance(source, dict):
            out.update(source)
    out.update(mapping)
    return out


def duplicate_keys(text: str) -> list[Problem]:
    """Every key given twice in one mapping, with its line and the first one's, in the words the line-keeping
    parser uses (a second pass over the events, run only once a fast path has met a duplicate)."""
    problems: list[Problem] = []
    builder = EventBuilder()

    def resolve(event: Any) -> Any:
        try:
            return builder.scalar(event)
        except Unusual:  # ``=``: a key PyYAML reads as text
            return event.value

    # One frame per open collection: [first line of each key (None for a sequence), position, awaiting a key]
    frames: list[list[Any]] = []
    events: Iterator[Any] = yaml.parse(text, Loader=_LOADER)  # the typed Event base lacks the fields
    for event in events:
        kind = type(event)
        starts = kind in (yaml.MappingStartEvent, yaml.SequenceStartEvent)
        if (starts or kind in (yaml.ScalarEvent, yaml.AliasEvent)) and frames:
            top = frames[-1]
            if top[0] is None:
                top[1] += 1
            elif top[2]:  # a key
                key = resolve(event) if kind is yaml.ScalarEvent else None
                line = event.start_mark.line + 1
                if key is not None and key is not _MERGE_KEY and key in top[0]:
                    path: Path = (*(f[1] for f in frames[:-1]), key)
                    problems.append(Problem(f"duplicate key {key!r} (first at line {top[0][key]}); YAML keeps "
                                            "only the last one, so delete one of them", path, line=line))
                elif key is not None and key is not _MERGE_KEY:
                    top[0][key] = line
                top[1], top[2] = key, False
                if not starts:
                    continue
            elif not starts:
                top[2] = True
        if starts:
            frames.append([{}, None, True] if kind is yaml.MappingStartEvent else [None, -1, False])
        elif kind in (yaml.MappingEndEvent, yaml.SequenceEndEvent):
            frames.pop()
            if frames and frames[-1][0] is not None:
                frames[-1][2] = True
    return problems


def load_fast(text: str) -> Any:
    """The data of a large document without line tracking: json when it is JSON, else libyaml's event stream
    built into values (``EventBuilder``), else PyYAML's own loader for the rare constructs the builder leaves
    to it. A key given twice raises DuplicateKeysError naming every one with its lines."""
    with paused_gc():
        return _load_fast(text)


@contextmanager
def paused_gc() -> Iterator[None]:
    """The cycle collector paused: its passes over the millions of containers a large document makes (and
    the objects checked from them) find nothing, since none of them form cycles."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def _load_fast(text: str) -> Any:
    try:
        if text.lstrip().startswith(("{", "[")):
            try:
                return json.loads(text, object_pairs_hook=unique)
            except json.JSONDecodeError:
                pass  # flow-style YAML
        try:
            return EventBuilder().load(text)
        except Unusual:
            deep = _too_deep(text)
            if deep is not None:  # PyYAML's loader would recurse until the process crashes
                raise yaml.YAMLError(deep.message) from None
            return yaml.load(text, Loader=_LOADER)
    except DuplicateKey:
        raise DuplicateKeysError(duplicate_keys(text)) from None
