"""Reading configuration files safely: size and binary checks before parsing, YAML parsed with the line
of every key and item recorded and duplicate keys reported, and a fast path for large documents (JSON;
rapidyaml when a scan shows it reads the file as PyYAML would; else libyaml's event stream), which
reports duplicate keys with their lines too.

Shared by the cluster file (``config.py``), ``autoscaler validate`` and the snapshot reader. Pure apart
from reading the one file it is given (no AWS or Kubernetes code), so the CDK app can use it.
"""

from __future__ import annotations

import gc
import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path as FilePath
from typing import Any

import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from autoscaler.domain.errors import Path, Problem

try:  # rapidyaml: parses in C++ and writes JSON that json.loads turns into values at C speed
    import ryml
except ImportError:  # pragma: no cover - an optional speed-up; libyaml's event stream is the fallback
    ryml = None

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


class _FastBuilder:
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
                raise _Unusual
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
                    raise _Unusual  # !!set, !!omap, ...: rare; PyYAML's own loader handles them
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
                        raise _Unusual  # PyYAML reports it as it always has
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
                        raise _DuplicateKey  # found again, with lines, by ``duplicate_keys``
                    top[key] = value
                except TypeError:  # an unhashable (list or mapping) key: PyYAML reports it
                    raise _Unusual from None
                keys[-1] = _NO_KEY
        return root


class _Unusual(Exception):
    """A construct the event builder leaves to PyYAML's loader."""


class _DuplicateKey(Exception):
    """A mapping holds a key twice: the file is read again to name every one with its lines."""


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
    builder = _FastBuilder()

    def resolve(event: Any) -> Any:
        try:
            return builder.scalar(event)
        except _Unusual:  # ``=``: a key PyYAML reads as text
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


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    mapping = dict(pairs)
    if len(mapping) != len(pairs):
        raise _DuplicateKey
    return mapping


# Where ryml's reading of a plain scalar could differ from PyYAML's (YAML 1.1: yes/on/~, 0x1f, 010, 12:30,
# dates, .inf, <<; or a number as a key), found by a scan of the text: every plain scalar that starts
# like a number, a special or one of those words. A false alarm only costs speed (the libyaml path).
_PLAIN_START = r"([ \n\[{,])(?=[0-9.~<=&*!+%@`|>yYnNoOtTfFiI?:-])"
_PLAIN_REST = r"[^\n#,\[\]{}:]*(?::[^\s,\[\]{}][^\n#,\[\]{}:]*)*"
_WORDS = (r"(?:yes|Yes|YES|no|No|NO|on|On|ON|off|Off|OFF|true|True|TRUE|false|False|FALSE|null|Null|NULL|"
          r"[-+]?\.?(?:nan|NaN|NAN|inf|Inf|INF|Infinity|infinity)|[yYnN])(?=[ \t]*(?:$|[:#,\]}]))")
# A complex key's ``?`` and an empty key's ``:`` (which PyYAML refuses) are candidates too, never agreeing.
_CANDIDATE = re.compile(rf"{_PLAIN_START}((?:[0-9.~<=&*!+%@`|>]|-(?=\S)){_PLAIN_REST}|{_WORDS}|[?:](?=\s|$))"
                        r"[ \t]*(:(?=\s|$))?", re.MULTILINE)
# Documents and directives: left to libyaml (a literal-prefixed search; one alternation costs ~5x as much).
_STRUCTURE = re.compile(r"\n(?:---|\.\.\.|%)")
# Line breaks to YAML 1.1 (PyYAML) but text to ryml; a tab, which PyYAML refuses where ryml takes it.
_DECLINED_CHARS = ("\x85", "\u2028", "\u2029", "\t")
_INF, _NAN = re.compile(r"inf(?:inity)?(?![\w.])"), re.compile(r"nan(?![\w.])")
_COMMENT_LINE = re.compile(r"^[ \t]*#.*$", re.MULTILINE)
_JSON_LITERAL = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?|true|false|null")
_BLOCK_SCALAR = re.compile(r"[|>][-+0-9]*")


def _agrees(token: str, *, key: bool, resolve: Any) -> bool:
    """Whether ryml's JSON and PyYAML read this plain scalar as the same value (keys: both as text)."""
    token = token.rstrip()
    if _BLOCK_SCALAR.fullmatch(token):
        return True
    if token[0] in "&*!%@`<=~?:":
        return False
    try:
        ours = resolve(token)
    except (yaml.YAMLError, ValueError):
        return False
    if key:
        return isinstance(ours, str)
    theirs = json.loads(token) if _JSON_LITERAL.fullmatch(token) else token
    return type(ours) is type(theirs) and ours == theirs


def _inf_or_nan(text: str) -> bool:
    """Whether a scalar, quoted or not, reads inf/nan (``.Inf``, ``'nan'``, ``-inf`` ...): ryml's JSON rewrites
    those, even quoted ones. Two literal-prefixed searches (fast in ``re``); the rare hits checked here."""
    low = text.lower()
    for pattern in (_INF, _NAN):
        for match in pattern.finditer(low):
            start = match.start()
            start -= start > 0 and low[start - 1] == "."
            start -= start > 0 and low[start - 1] in "+-"
            before = low[start - 1] if start else " "
            if not (before.isalnum() or before in "_."):
                return True
    return False


@contextmanager
def _quiet_stderr() -> Iterator[None]:
    """ryml prints its parse errors on stderr from C++; the libyaml path reports them, with lines."""
    try:
        saved = os.dup(2)
    except OSError:  # no stderr to silence
        yield
        return
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _load_rapid(text: str) -> Any:
    """The data through rapidyaml when it reads the file exactly as ``yaml.safe_load`` would, else _Unusual."""
    if ryml is None or any(c in text for c in _DECLINED_CHARS) or _inf_or_nan(text):
        raise _Unusual
    # Whole-line comments are skipped: such a line is a comment, or text inside a quoted or block scalar.
    scanned = "\n" + (_COMMENT_LINE.sub("", text) if "#" in text else text)
    if _STRUCTURE.search(scanned):
        raise _Unusual
    builder = _FastBuilder()

    def resolve(token: str) -> Any:
        return builder.scalar(yaml.ScalarEvent(None, None, (True, False), token, style=""))

    # After ``{`` or ``,`` a scalar may be a flow mapping's key without a colon (``{a: 1, 5}``).
    for before, token, colon in set(_CANDIDATE.findall(scanned)):
        if not _agrees(token, key=bool(colon) or before in "{,", resolve=resolve):
            raise _Unusual
    try:
        with _quiet_stderr():
            tree = ryml.parse_in_arena(text.encode())
            emitted = ryml.emit_json_malloc(tree, tree.root_id())
        return json.loads(emitted, object_pairs_hook=_unique)
    except (ryml.ExceptionBasic, ValueError, TypeError):  # TypeError: an empty document
        raise _Unusual from None


def load_fast(text: str) -> Any:
    """The data of a large document without line tracking: json when it is JSON, else rapidyaml when it reads
    the file as PyYAML would, else the event builder. A key given twice raises DuplicateKeysError."""
    # The values built are acyclic: the cycle collector's passes over millions of new containers are wasted.
    collecting = gc.isenabled()
    gc.disable()
    try:
        if text.lstrip().startswith(("{", "[")):
            try:
                return json.loads(text, object_pairs_hook=_unique)
            except json.JSONDecodeError:
                pass  # flow-style YAML
        try:
            return _load_rapid(text)
        except _Unusual:
            pass
        try:
            return _FastBuilder().load(text)
        except _Unusual:
            deep = _too_deep(text)
            if deep is not None:  # PyYAML's loader would recurse until the process crashes
                raise yaml.YAMLError(deep.message) from None
            return yaml.load(text, Loader=_LOADER)
    except _DuplicateKey:
        raise DuplicateKeysError(duplicate_keys(text)) from None
    finally:
        if collecting:
            gc.enable()
