"""YAML read through rapidyaml exactly as ``yaml.safe_load`` reads it: the guard that declines what the two
parsers would read differently, and, for a large document, its split at top-level boundaries into pieces
converted on two cores (a forked helper process, which also finds keys given twice) while this process
builds the values and checks runs of list items; the helper, once done converting, checks runs too.

Used by ``source_file.load_fast`` (``autoscaler plan`` and ``autoscaler validate`` on large files; never in
Lambda). Pure apart from the helper process, pipes, one shared byte and one temporary file holding its JSON
and the results of its checks (pickled: the file is this process's own, unlinked, never another's).
"""

from __future__ import annotations

import json
import mmap
import os
import pickle
import re
import select
import signal
import struct
import sys
import tempfile
import threading
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol, runtime_checkable

import yaml

try:  # rapidyaml: parses in C++ and writes JSON that json.loads turns into values at C speed
    import ryml
except ImportError:  # pragma: no cover - an optional speed-up; libyaml's event stream is the fallback
    ryml = None

Resolve = Callable[[str], Any]  # how PyYAML reads a plain scalar


@runtime_checkable
class ListChecks(Protocol):
    """An ``on_list`` whose checks the helper process may also run: once it has converted every piece, it
    checks runs of items from the end of the document while this process checks from the start."""

    def __call__(self, items: list[Any]) -> object:
        """Check a run of items here (in the process reading the document)."""

    def check(self, items: list[Any]) -> Any:
        """In the helper: the result of checking a run, pickled back to ``checked``; None when it has none."""

    def checked(self, items: list[Any], result: Any) -> None:
        """Here: the helper's result for a run; ``items`` are this process's own values of the same text."""


class Unusual(Exception):
    """A construct rapidyaml may read differently from PyYAML: the caller's slower paths take the file."""


class DuplicateKey(Exception):
    """A mapping holds a key twice: the caller reads the file again to name every one with its lines."""


def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``' object hook: a key given twice is an error, not silently the last one."""
    mapping = dict(pairs)
    if len(mapping) != len(pairs):
        raise DuplicateKey
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


def _agrees(token: str, *, key: bool, resolve: Resolve) -> bool:
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


def check(text: str, *, resolve: Resolve, piece: bool = False) -> None:
    """Raise Unusual unless ryml reads ``text`` as PyYAML does (and, for a ``piece`` of a document ``split``
    cut, unless a column-0 line inside it is text). Every check is local to a line, so it runs once per
    distinct line: a snapshot repeats most of its lines (keys, images, requests)."""
    if any(c in text for c in _DECLINED_CHARS):
        raise Unusual
    lines = "\n" + "\n".join(set(text.split("\n")))
    if _inf_or_nan(lines) or (piece and _open_reaches_column0(text, lines)):
        raise Unusual
    # Whole-line comments are skipped: such a line is a comment, or text inside a quoted or block scalar.
    scanned = _COMMENT_LINE.sub("", lines) if "#" in lines else lines
    if _STRUCTURE.search(scanned):
        raise Unusual
    # After ``{`` or ``,`` a scalar may be a flow mapping's key without a colon (``{a: 1, 5}``).
    for before, token, colon in set(_CANDIDATE.findall(scanned)):
        if not _agrees(token, key=bool(colon) or before in "{,", resolve=resolve):
            raise Unusual


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


def to_json(text: str, *, resolve: Resolve, piece: bool = False) -> bytearray:
    """The document as JSON written by rapidyaml, or Unusual when it could read differently from PyYAML."""
    if ryml is None:
        raise Unusual
    check(text, resolve=resolve, piece=piece)
    source = text.encode()
    try:
        with _quiet_stderr():
            tree = ryml.parse_in_arena(source)
            out = bytearray(2 * len(source) + 64)
            failed, size = ryml.emit_json_to_substr(tree, tree.root_id(), out)
            if failed:  # deep nesting writes more indentation than the source had
                out = bytearray(size)
                ryml.emit_json_to_substr(tree, tree.root_id(), out)
    except ryml.ExceptionBasic:
        raise Unusual from None
    del out[size:]
    return out


def _loads(emitted: bytes | bytearray, *, unique_keys: bool = False) -> Any:
    """The values of rapidyaml's JSON; DuplicateKey for a key given twice, unless the helper found none
    (``unique_keys``: then plain ``json.loads``, which builds mappings ~1.5x as fast as with a hook)."""
    try:
        return json.loads(emitted) if unique_keys else json.loads(emitted, object_pairs_hook=unique)
    except (ValueError, TypeError):  # TypeError: an empty document
        raise Unusual from None


def _refuse_duplicate(pairs: list[tuple[str, Any]]) -> None:
    if len(pairs) > 1 and len({key for key, _ in pairs}) != len(pairs):
        raise DuplicateKey


def _has_duplicate(emitted: bytes | bytearray) -> bool:
    """Whether a mapping in rapidyaml's JSON holds a key twice: the helper's check of each piece it converts,
    so that this process builds the values with plain ``json.loads`` (no mapping is kept: ~0.7x the time)."""
    try:
        json.loads(emitted, object_pairs_hook=_refuse_duplicate)
    except DuplicateKey:
        return True
    except (ValueError, TypeError):
        raise Unusual from None
    return False


# Splitting pays from about a MB (a fork costs milliseconds); a piece is big enough that per-piece costs
# vanish (~1 ms each), small enough that the checking of the first can start early.
PARALLEL_MIN_BYTES = 1_000_000
PIECE_BYTES = 256_000
_MAX_PIECES = 255  # a piece's number is one byte in the helper's work queue
_COL0 = re.compile(r"\n(?=[^ \t\n#])")  # a line that starts at column 0 and is not a comment
_COL0_KEY = re.compile(r"\n(?=[^ \t\n#-]|-[^ \n])")  # ... nor a list item
# A quote that runs unclosed to the end of its line (an opening one when it starts a scalar: checked in
# code, since a lookbehind first would make ``re`` try every position), and a flow collection's opening.
_OPEN_QUOTE = re.compile(r"""['"](?:(?<=')(?:[^'\n]|'')*|(?<=")(?:[^"\\\n]|\\.)*\\?)$""", re.MULTILINE)
_QUOTE_AFTER = frozenset(" \n[{,:")
_FLOW_OPEN = re.compile(r"[\[{]")
_ESCAPES = re.compile(r"\\.")


def _open_reaches_column0(text: str, lines: str) -> bool:
    """Whether a quoted scalar or flow collection spans lines onto one starting at column 0: there, a line
    that looks like a key or a list item is text, so the document cannot be cut at its column-0 lines.
    ``lines`` holds each distinct line of ``text`` once (PyYAML writes long text over indented lines)."""
    line_end = -1
    for bracket in _FLOW_OPEN.finditer(lines):
        if bracket.start() < line_end:
            continue  # this line is checked already
        start, line_end = lines.rfind("\n", 0, bracket.start()) + 1, lines.find("\n", bracket.start())
        line = lines[start:line_end if line_end >= 0 else len(lines)]
        if line.count("[") != line.count("]") or line.count("{") != line.count("}"):
            return True
        if line_end < 0:
            break
    at = -1
    while (match := _OPEN_QUOTE.search(lines, at + 1)) is not None:
        at = match.start()
        if at > 0 and lines[at - 1] not in _QUOTE_AFTER:
            continue  # in a plain scalar (``it's``; a key's: ``x"y: 'z``) or a closing quote: search on
        start, end = lines.rfind("\n", 0, at) + 1, lines.find("\n", at)
        line = lines[start:end if end >= 0 else len(lines)]
        found = text.find(line)
        while found >= 0:
            after = found + len(line)
            whole = (found == 0 or text[found - 1] == "\n") and (after == len(text) or text[after] == "\n")
            if whole and _continues_to_column0(text, after, lines[at]):
                return True
            found = text.find(line, after)
    return False


def _continues_to_column0(text: str, end: int, quote: str) -> bool:
    """Whether the quoted scalar left open at ``end`` (the end of its first line) meets a line starting at
    column 0 before it closes."""
    while end < len(text):
        start = end + 1
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        line = text[start:end]
        if line[:1] not in ("", " "):
            return True
        if quote in (line.replace("''", "") if quote == "'" else _ESCAPES.sub("", line)):
            return False
    return False


def _after_an_item(text: str, cut: int) -> bool:
    """Whether the last line before ``cut`` that starts at column 0 (comments aside) is a list item: then a
    ``- `` line at ``cut`` continues a column-0 list, and not the key just above it."""
    end = cut - 1
    while end > 0:
        start = text.rfind("\n", 0, end) + 1
        line = text[start:end]
        if line[:1] not in ("", " ", "#"):
            return line.startswith("- ") or line == "-"
        end = start - 1
    return False


def split(text: str) -> list[str]:
    """The document cut at lines starting at column 0, into pieces each a document of its own: the first a
    mapping (or a list), each next one further keys of the top-level mapping, or further items of the list
    the previous piece ends in. One piece when the document is small or its shape not plainly so. A cut
    inside a quoted scalar or flow collection leaves the piece before unterminated, which ryml refuses;
    every piece is checked for such text reaching a column-0 line elsewhere (``check``)."""
    if len(text) < PARALLEL_MIN_BYTES or "\r" in text or text.lstrip()[:1] in ("{", "[", ""):
        return [text]
    size = max(PIECE_BYTES, len(text) // _MAX_PIECES + 1)
    cuts, at = [0], size
    while (match := _COL0.search(text, at)) is not None:
        cut = at = match.end()
        if text.startswith(("- ", "-\n"), cut):
            if not _after_an_item(text, cut):
                continue
            # A piece of list items ends where the top-level mapping's next key starts (the search may look
            # a character past the piece, so that a key line starting right at its end is found too).
            key = _COL0_KEY.search(text, cut, cut + size + 2)
            if key is not None:
                cuts.append(cut)
                cut = key.end()
        if text[cut] == "-" and not text.startswith(("- ", "-\n"), cut):  # ``-x: 1`` or ``---``: left whole
            return [text]
        cuts.append(cut)
        at = cut + size
    return [text[start:end] for start, end in zip(cuts, [*cuts[1:], len(text)], strict=True)]


def _join(pieces: list[str], values: list[Any]) -> Any:
    """The document's value from its pieces' values (see ``split``)."""
    root = values[0]
    for piece, value in zip(pieces[1:], values[1:], strict=True):
        if piece.startswith("-"):  # further items of the list the document so far ends in
            tail = root[next(reversed(root))] if isinstance(root, dict) and root else root
            if not isinstance(tail, list) or not isinstance(value, list):
                raise Unusual
            tail.extend(value)
        elif isinstance(root, dict) and isinstance(value, dict):
            for key, item in value.items():
                if key in root:
                    raise DuplicateKey
                root[key] = item
        else:
            raise Unusual
    return root


def _two_cores() -> bool:
    """Fork is cheap and safe on Linux in a single-threaded process (another thread could hold a lock the
    helper then needs); elsewhere, on one core, or beside other threads, the pieces are converted here."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return sys.platform == "linux" and cores > 1 and threading.active_count() == 1


def load(text: str, *, resolve: Resolve, on_list: Callable[[list[Any]], object] | None = None) -> Any:
    """The document's data through rapidyaml, equal to ``yaml.safe_load``'s, or Unusual (DuplicateKey when a
    key is given twice). A large document is converted on two cores; meanwhile ``on_list`` is given each
    run of items of a top-level list as soon as it is built (the caller's head start on checking them)."""
    if ryml is None:
        raise Unusual
    pieces = split(text)
    if len(pieces) > 1 and _two_cores():
        try:
            return _join(pieces, _convert_in_two(pieces, resolve=resolve, on_list=on_list))
        except OSError:  # no pipe, process or temporary file to be had: the pieces are converted here
            pass
    many = len(pieces) > 1
    return _join(pieces, [_loads(to_json(piece, resolve=resolve, piece=many)) for piece in pieces])


_RECORD = struct.Struct("<iiqq")  # piece, status, offset and length of its JSON (or pickled check result)
# A record's status: converted (no key given twice), declined, a key given twice, or its run of items checked.
_DONE, _DECLINED, _DUPLICATE, _CHECKED = 0, 1, 2, 3


def _helper(pieces: list[str], *, resolve: Resolve, queue: int, results: int, out: int,
            on_list: Callable[[list[Any]], object] | None = None, reached: mmap.mmap | None = None) -> None:
    """The forked helper: takes piece numbers from the queue until it is empty, writes each piece's JSON to
    ``out`` and a record of it to ``results``; stops at the first piece rapidyaml must not read, or that holds
    a key twice (its spare time is spent on that check, which this process then need not make). Then, for
    ``ListChecks``, it checks the runs of items it converted, the last first, until it meets the run this
    process is checking (``reached``: shared memory holding its piece number)."""
    offset = 0
    converted: dict[int, tuple[int, int]] = {}  # piece -> offset and length of its JSON in ``out``
    while number := os.read(queue, 1):
        try:
            emitted = to_json(pieces[number[0]], resolve=resolve, piece=True)
            status = _DUPLICATE if _has_duplicate(emitted) else _DONE
        except Unusual:
            emitted, status = bytearray(), _DECLINED
        os.pwrite(out, emitted, offset)
        os.write(results, _RECORD.pack(number[0], status, offset, len(emitted)))
        if status:
            return
        converted[number[0]] = offset, len(emitted)
        offset += len(emitted)
    if not isinstance(on_list, ListChecks):
        return
    for last in sorted((n for n in converted if pieces[n].startswith("-")), reverse=True):
        if reached is not None and last <= reached[0]:
            return
        start, length = converted[last]
        try:
            result = on_list.check(json.loads(os.pread(out, length, start)))
            blob = pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL) if result is not None else b""
        except Exception:  # this process checks the run itself, and names what is wrong
            continue
        if blob:
            os.pwrite(out, blob, offset)
            os.write(results, _RECORD.pack(last, _CHECKED, offset, len(blob)))
            offset += len(blob)


def _read_record(results: int) -> tuple[int, int, int, int] | None:
    """The helper's next record; None once it has ended and every record is read."""
    data = b""
    while len(data) < _RECORD.size:
        chunk = os.read(results, _RECORD.size - len(data))
        if not chunk:
            return None
        data += chunk
    number, status, offset, length = _RECORD.unpack(data)
    return number, status, offset, length


def _convert_in_two(pieces: list[str], *, resolve: Resolve,
                    on_list: Callable[[list[Any]], object] | None) -> list[Any]:
    """Each piece's value. A forked helper converts pieces to JSON; this process builds their values
    (``json.loads``) as they come, hands runs of list items to ``on_list``, and converts pieces itself
    only when it has nothing else to do: both cores stay busy. Any piece declined declines the document.
    Then, for ``ListChecks``, the helper checks runs from the end while this process checks from the start."""
    values: list[Any] = [None] * len(pieces)
    done = [False] * len(pieces)
    waiting: deque[int] = deque()  # pieces whose built runs of items are not yet given to on_list
    stolen: set[int] = set()  # ... or were checked by the helper instead (ListChecks)
    queue, queue_in = os.pipe()
    os.write(queue_in, bytes(range(len(pieces))))  # far below a pipe's buffer
    os.close(queue_in)
    results, results_in = os.pipe()
    reached = mmap.mmap(-1, 1)  # anonymous, so shared with the helper after the fork
    with reached, tempfile.TemporaryFile() as out:
        pid = os.fork()
        if pid == 0:  # the helper: never returns into the caller's code
            try:
                os.close(results)
                # Its own session, so its own scheduling group under Linux's autogroup: where other sessions
                # keep the cores busy, the helper's time then is not taken from this process's share.
                os.setsid()
                _helper(pieces, resolve=resolve, queue=queue, results=results_in, out=out.fileno(),
                        on_list=on_list, reached=reached)
            finally:
                os._exit(0)
        os.close(results_in)

        def built(number: int, value: Any) -> None:
            values[number], done[number] = value, True
            if on_list is not None and pieces[number].startswith("-") and isinstance(value, list):
                waiting.append(number)

        def take() -> bool:
            """Builds the values of the helper's next piece (waiting for it), or takes its check of a run
            not yet checked here; False once the helper has ended."""
            record = _read_record(results)
            if record is None:
                return False
            number, status, offset, length = record
            if status == _CHECKED:
                if number in waiting and isinstance(on_list, ListChecks):  # else checked here meanwhile
                    on_list.checked(values[number], pickle.loads(os.pread(out.fileno(), length, offset)))
                    stolen.add(number)
                return True
            if status == _DUPLICATE:
                raise DuplicateKey
            if status != _DONE:
                raise Unusual
            built(number, _loads(os.pread(out.fileno(), length, offset), unique_keys=True))
            return True

        def check_next() -> None:
            number = waiting.popleft()
            reached[0] = max(reached[0], number)  # one byte: written whole, so the helper reads it whole
            if on_list is not None and number not in stolen:
                on_list(values[number])

        try:
            helping = True
            while not all(done):
                if helping and select.select([results], [], [], 0)[0]:
                    helping = take()
                elif waiting:
                    check_next()
                elif number := os.read(queue, 1):
                    built(number[0], _loads(to_json(pieces[number[0]], resolve=resolve, piece=True)))
                elif not (helping and take()):  # the helper ended early (killed, out of memory)
                    raise Unusual
            while waiting:  # the helper checks runs from the end meanwhile
                if helping and select.select([results], [], [], 0)[0]:
                    helping = take()
                else:
                    check_next()
            return values
        finally:
            os.kill(pid, signal.SIGKILL)  # done, or checking runs no longer needed
            os.waitpid(pid, 0)
            os.close(queue)
            os.close(results)
