"""The fast YAML paths of ``autoscaler plan`` (rapidyaml, then libyaml's event stream) read every document
exactly as ``yaml.safe_load`` does, value for value and type for type, and reject a key given twice with
the message and lines ``autoscaler validate`` gives."""

from __future__ import annotations

import json
import math
import mmap
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler import rapid_yaml, source_file
from autoscaler.adapters import snapshot_file
from autoscaler.cli import main
from autoscaler.domain.errors import ConfigError
from autoscaler.source_file import DuplicateKeysError, _FastBuilder, _load_rapid, _Unusual, load_fast

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _same(a: Any, b: Any) -> bool:
    """Equal and of the same types all the way down (``True == 1`` and ``1 == 1.0`` do not count)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(map(repr, a)) == list(map(repr, b)) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b) or (isinstance(a, float) and math.isnan(a) and math.isnan(b))


# Plain scalars YAML 1.1 (PyYAML) and YAML 1.2 / JSON read differently, and some they read alike.
TOKENS = ["yes", "Yes", "NO", "on", "Off", "y", "n", "true", "True", "FALSE", "null", "Null", "NULL", "~", "",
          "0", "-0", "+1", "-3", "010", "0o17", "0b11", "0x1f", "1_000", "12:30", "1:20:30.5", "1e3", "1.0e3",
          "1.0e+3", "1.", ".5", "1.50", "-1.5e-3", "nan", "NaN", ".nan", "inf", "-.inf", ".Inf", "Infinity",
          "2024-01-01", "2001-12-14 21:59:43.10 -5", "2024-01-15T12:00:00Z", "10.0.1.5", "100m", "1Gi",
          "nginx:1.25", "a:b", "-", "1-2", "12345678901234567890", "http://x/y", "=", "0.0", "1,5", ".INF",
          "-inf", "infinity", "info", "banana", "x.nan"]


@pytest.mark.parametrize("token", TOKENS)
@pytest.mark.parametrize("shape", ["a: {t}\n", "- {t}\n", "[{t}, x]\n", "{{k: {t}}}\n", "{t}: v\n",
                                   "m:\n  {t}: v\n  w: 1\n", "a: '{t}'\n", 'a: "{t}"\n', "a:\n  - - {t}\n"])
def test_every_scalar_reads_as_safe_load_reads_it(shape: str, token: str) -> None:
    # Given a plain, quoted, key or item scalar that YAML 1.1 and 1.2 may read differently
    text = shape.format(t=token)
    try:
        expected = yaml.safe_load(text)
    except yaml.YAMLError:
        pytest.skip("not YAML that safe_load reads")
    # When the fast loader reads it, then the value and its type are safe_load's
    assert _same(load_fast(text), expected), text


@pytest.mark.parametrize("text", [
    "a: &x {b: 1}\nc: *x\n", "a: !!str 5\n", "e:\n  <<: {a: 1}\n  b: 2\n", "x: |\n  multi\n  0x1f\ny: >-\n  f\n",
    'a: "tab\\there \\u00e9 \\x41 \\N"\nb: \'it\'\'s\'\n', "a: plain\n  continued 10\n", "é: ü\n", "a: 1 # c\n",
    "? [1]\n", "%YAML 1.1\n---\na: 1\n", "a: [1, {b: [2, {c: 3}]}]\n", "-\n- a\n", "a: `x\n", "a: @x\n",
    "# a comment with `code` and 0x1f\na: 1 # and 0x1f\n", "a: =\n", "=: v\n", "a: |\n  # not a comment\n  x\n",
    "a: 1\r\nb: 'x\r\n  y'\r\n", "\ufeffa: 1\n", "a: 'x\x85 y'\nb: \"\u2028\"\n", "a: \"\\t\"\n", "a: |\n  x\ty\n",
    ": x\n", "{: x}\n", "- : x\n", "a:\n  b: 1\n c: 2\n",
])
def test_documents_read_as_safe_load_reads_them(text: str) -> None:
    # Given anchors, tags, merge keys, block scalars, escapes, multi-line plain scalars, unicode, directives
    # When read by the fast loader, then the result (or the refusal) is safe_load's
    _reads_as_safe_load(text)


def _reads_as_safe_load(text: str) -> bool:
    """Assert ``load_fast`` reads ``text`` as ``yaml.safe_load`` does, or refuses it as safe_load does;
    False when refused."""
    try:
        expected = yaml.safe_load(text)
    except yaml.YAMLError:
        with pytest.raises(yaml.YAMLError):
            load_fast(text)
        return False
    assert _same(load_fast(text), expected), text
    return True


_SCALARS = st.one_of(st.sampled_from(TOKENS), st.text(alphabet="aZ09.:-_ ~'\"#é\t", max_size=8),
                     st.integers(), st.floats(allow_nan=False), st.booleans(), st.none())
_DOCS = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=4)
                     | st.dictionaries(st.sampled_from(TOKENS[:30]) | st.text(max_size=5), inner, max_size=4),
                     max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(doc=_DOCS, flow=st.booleans())
def test_random_documents_read_as_safe_load_reads_them(doc: Any, flow: bool) -> None:
    # Given any document PyYAML writes, in block or flow style
    text = yaml.safe_dump({"root": doc}, default_flow_style=flow, allow_unicode=True)
    expected = yaml.safe_load(text)
    # When read by the fast loader, then it equals safe_load's reading
    try:
        got = load_fast(text)
    except DuplicateKeysError:
        # ... unless two keys PyYAML wrote read back as one (a quoted NEL folds to a space): safe_load keeps
        # the last, the product refuses the duplicate
        assert _keys(expected) < _keys({"root": doc}), text
        return
    assert _same(got, expected), text


def _keys(value: Any) -> int:
    if isinstance(value, dict):
        return len(value) + sum(_keys(v) for v in value.values())
    return sum(_keys(v) for v in value) if isinstance(value, list) else 0


def _as_written(path: Path) -> str:
    """The file as ``autoscaler snapshot`` would write it (write_snapshot: no aliases, no comments)."""
    data = json.loads(json.dumps(yaml.safe_load(path.read_text()), default=str))
    return yaml.dump(data, Dumper=yaml.CSafeDumper, default_flow_style=False, sort_keys=False)


@pytest.mark.parametrize("text", [(EXAMPLES / "snapshot-minimal.yaml").read_text(),
                                  _as_written(EXAMPLES / "inflate-spot.yaml")], ids=["commented", "written"])
def test_a_snapshot_takes_the_rapidyaml_path(text: str) -> None:
    # Given example snapshots (comments, block YAML, quoted timestamps, as `autoscaler snapshot` writes)
    # When read through rapidyaml, then nothing makes it fall back and the data is safe_load's
    assert _same(_load_rapid(text), yaml.safe_load(text))


@pytest.mark.parametrize("text", ["a: yes\n", "5: x\n", "a: *b\n", "a: 0x1f\n", "t: 2024-01-01\n", "a: '.Inf'\n",
                                  "'nan': 1\n", "a: [x, -inf]\n", "a: \"infinity\"\n", ": x\n", "a: 'x\u2028'\n"])
def test_what_rapidyaml_would_read_otherwise_is_left_to_libyaml(text: str) -> None:
    # Given a scalar ryml's JSON would type differently from PyYAML, then the rapid path declines it
    with pytest.raises(_Unusual):
        _load_rapid(text)


def _plan_error(path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["plan", "--snapshot", str(path)]) != 0
    return capsys.readouterr().err


def _validate_lines(path: Path, capsys: pytest.CaptureFixture[str]) -> list[str]:
    main(["validate", str(path)])
    return [line for line in capsys.readouterr().out.splitlines() if "duplicate key" in line]


SNAPSHOT = (EXAMPLES / "snapshot-minimal.yaml").read_text()


@pytest.mark.parametrize(("name", "text", "lines"), [
    # region repeated at the end of the file (YAML would silently keep the last one)
    ("top.yaml", SNAPSHOT + "region: eu-west-1\n", ["region"]),
    # a pod's name twice, inside a list: the rapidyaml path meets it
    ("pod.yaml", "region: us-east-1\npods:\n- metadata:\n    name: a\n    namespace: d\n    name: b\n",
     ["pods[0].metadata.name"]),
    # the same with an anchor in the file, so the libyaml event path meets it
    ("anchor.yaml", "x: &a 1\nregion: us-east-1\npods:\n- metadata: {name: a, name: b}\nregion: *a\n",
     ["pods[0].metadata.name", "region"]),
    # JSON is read by json.loads, which keeps the last key silently too
    ("snap.json", '{"region": "us-east-1",\n "pods": [],\n "region": "eu-west-1"}\n', ["region"]),
])
def test_plan_rejects_duplicate_keys_as_validate_does(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      name: str, text: str, lines: list[str]) -> None:
    # Given a snapshot with a key given twice in one mapping
    path = tmp_path / name
    path.write_text(text)
    # When it is planned, then plan fails naming file:line and the key, in validate's words
    err = _plan_error(path, capsys)
    expected = _validate_lines(path, capsys)
    assert len(expected) == len(lines)
    for line, field in zip(expected, lines, strict=True):
        assert line.startswith(f"{path}:") and f": {field}: duplicate key" in line
        assert line in err


def test_a_large_snapshot_with_a_duplicate_key_is_reported_with_its_line(tmp_path: Path) -> None:
    # Given a snapshot over the 5 MB line-tracking limit with a duplicate key near its end
    body = "pods:\n" + "".join(f"- metadata:\n    name: p{i}\n    namespace: d\n  spec:\n    containers:\n"
                                "    - name: c\n" for i in range(70_000))
    path = tmp_path / "big.yaml"
    path.write_text(body + "nodes: []\nnodes: []\n")
    assert path.stat().st_size > source_file.MAX_CONFIG_BYTES
    # When validate reads it (no line tracking at this size), then the duplicate still has its lines
    from autoscaler.validate import validate_file
    report = validate_file(path)
    last = body.count("\n") + 2
    assert [(p.line, p.message.split(";")[0]) for p in report.problems] == [
        (last, f"duplicate key 'nodes' (first at line {last - 1})")]


def test_the_json_and_event_paths_agree_on_a_real_snapshot() -> None:
    # Given the example snapshot as JSON and as YAML
    data = yaml.safe_load(SNAPSHOT)
    # When each path reads it, then they all give the same data
    assert _same(load_fast(json.dumps(data)), data)
    assert _same(_FastBuilder().load(SNAPSHOT), data)


@pytest.fixture
def in_pieces(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Any document is split (into pieces of ~60 characters) and converted on two cores; the list holds the
    number of pieces of each document read that way."""
    monkeypatch.setattr(rapid_yaml, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(rapid_yaml, "PIECE_BYTES", 60)
    monkeypatch.setattr(rapid_yaml, "_two_cores", lambda: True)  # also beside a thread other tests left
    calls: list[int] = []
    convert = rapid_yaml._convert_in_two

    def counted(pieces: list[str], **kwargs: Any) -> list[Any]:
        values = convert(pieces, **kwargs)
        calls.append(len(pieces))
        return values

    monkeypatch.setattr(rapid_yaml, "_convert_in_two", counted)
    return calls


_WRITTEN = _as_written(EXAMPLES / "inflate-spot.yaml")
_ITEM = "- name: p{i}\n  labels: {{app: web}}\n  requests:\n    cpu: '1'\n    memory: 1Gi\n"
_LONG = yaml.safe_dump({"a": ["word " * 30, {"b": "x " * 50, "c": 'say "hi" ' * 12}]}, width=60)


@pytest.mark.parametrize(("text", "split"), [
    # what `autoscaler snapshot` writes: top-level keys, long column-0 lists
    (_WRITTEN, True),
    # comments and blank lines between items at column 0; two lists; a scalar between them
    ("region: x\npods:\n" + "".join(_ITEM.format(i=i) + ("# note\n\n" if i % 3 else "") for i in range(12))
     + "n: 1\nnodes:\n" + "".join(_ITEM.format(i=i) for i in range(8)), True),
    # long text PyYAML writes over indented lines, quoted and plain
    (_LONG * 1 + "pods:\n" + "".join(f"- '{'y ' * 40}{i}'\n" for i in range(10)) + _LONG.replace("a:", "z:"), True),
    # a document that is a list
    ("".join(_ITEM.format(i=i) for i in range(10)), True),
    # a quoted scalar running onto a column-0 line that looks like an item: valid, and not cut there
    ("k:\n" + "- 'a\n- b'\n- c\n" * 10, False),
    # the same inside an indented list: safe_load refuses it, so must the fast path
    ("k:\n" + "  - 'a\n- b'\n" * 5 + "- c\n" * 5, False),
    # ... opening after a quote inside a plain key, which does not open a scalar
    ("k:\n" + "  - x\"y: 'a\n- b'\n" * 5 + "- c\n" * 5, False),
    ("k:\n" + "- x\"y: 'a\n- b'\n" * 5 + "- c\n" * 5, False),
    # flow collections over several lines, one of them with a column-0 line
    ("k: [a,\nb]\nm:\n" + "- {x: 1,\n  y: 2}\n" * 10, False),
    # a column-0 key starting with '-', and a list right after a key
    ("a:\n" + "- 1\n" * 30 + "-x: 2\nb:\n- 3\n", False),
    # items of a list that is not the last key's (safe_load refuses)
    ("a: 1\n" * 1 + "b: [1]\n" + "- 2\n" * 30, False),
])
def test_a_document_read_in_pieces_reads_as_safe_load_reads_it(in_pieces: list[int], text: str,
                                                                split: bool) -> None:
    # Given a document cut at column-0 lines into pieces converted by two processes
    # When the fast loader reads it, then the result (or the refusal) is safe_load's
    if not _reads_as_safe_load(text):
        return
    # and a plainly shaped document was read in pieces, on two cores
    assert bool(in_pieces and in_pieces[0] > 1) is split


def test_a_key_repeated_in_another_piece_is_a_duplicate(in_pieces: list[int]) -> None:
    # Given a top-level key given again far below, in another piece
    text = "region: a\npods:\n" + "".join(_ITEM.format(i=i) for i in range(20)) + "region: b\n"
    # When read in pieces, then the duplicate is reported with both lines
    with pytest.raises(source_file.DuplicateKeysError) as caught:
        load_fast(text)
    assert [p.line for p in caught.value.problems] == [text.count("\n")]
    assert in_pieces


def test_a_piece_the_helper_declines_sends_the_document_to_libyaml(in_pieces: list[int]) -> None:
    # Given a YAML 1.1 boolean deep in a long list, which the helper process converts
    text = "pods:\n" + "".join(_ITEM.format(i=i) for i in range(30)) + "- flag: yes\n"
    # When read in pieces, then the rapid path declines it and the result is still safe_load's
    assert len(rapid_yaml.split(text)) > 1
    assert _same(load_fast(text), yaml.safe_load(text))
    assert not in_pieces


def test_a_helper_that_dies_sends_the_document_to_libyaml(in_pieces: list[int],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a helper process that ends before converting anything (killed, out of memory)
    def dies(*_: Any, **__: Any) -> None:
        os._exit(0)

    monkeypatch.setattr(rapid_yaml, "_helper", dies)
    text = "pods:\n" + "".join(_ITEM.format(i=i) for i in range(30))
    # When read in pieces, then the document is still read, as safe_load reads it
    assert _same(load_fast(text), yaml.safe_load(text))


@settings(max_examples=60, deadline=None)
@given(lists=st.lists(st.lists(_DOCS, max_size=6), min_size=1, max_size=3), flow=st.booleans())
def test_random_documents_read_in_pieces_as_safe_load_reads_them(lists: list[list[Any]], flow: bool) -> None:
    # Given any document of top-level lists PyYAML writes, cut into pieces
    text = yaml.safe_dump({f"k{i}": items for i, items in enumerate(lists)}, default_flow_style=flow,
                          allow_unicode=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(rapid_yaml, "PARALLEL_MIN_BYTES", 0)
        patch.setattr(rapid_yaml, "PIECE_BYTES", 30)
        # When read by the fast loader, then it equals safe_load's reading
        assert _same(load_fast(text), yaml.safe_load(text)), text


def _big_snapshot(pods: int, *, bad: int | None = None) -> dict[str, Any]:
    """inflate-spot.yaml's snapshot with ``pods`` uniquely named pods (the one at ``bad`` with a negative
    request) and as many nodes, so that both lists span several pieces."""
    data: dict[str, Any] = json.loads(json.dumps(yaml.safe_load((EXAMPLES / "inflate-spot.yaml").read_text()),
                                                 default=str))
    template = data["pods"][0]
    data["pods"] = []
    for i in range(pods):
        pod = json.loads(json.dumps(template))
        pod["metadata"]["name"] = f"p-{i}"
        if i == bad:
            pod["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "-1"}}
        data["pods"].append(pod)
    data["nodes"] = [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"n-{i}", "labels": {"a": "b"}},
                      "status": {"allocatable": {"cpu": "2", "memory": "4Gi", "pods": "110"}}}
                     for i in range(pods)]
    return data


def _write_both(tmp_path: Path, data: dict[str, Any]) -> tuple[Path, Path]:
    as_yaml, as_json = tmp_path / "snap.yaml", tmp_path / "snap.json"
    as_yaml.write_text(yaml.dump(data, Dumper=yaml.CSafeDumper, default_flow_style=False, sort_keys=False))
    as_json.write_text(json.dumps(data))
    return as_yaml, as_json


def test_pods_checked_while_a_yaml_snapshot_is_read_plan_as_its_json(in_pieces: list[int], tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a snapshot read in pieces, whose pods are checked as each run of them is built
    monkeypatch.setattr(rapid_yaml, "PIECE_BYTES", 2000)
    as_yaml, as_json = _write_both(tmp_path, _big_snapshot(60))
    planned: list[bool] = []
    plan = snapshot_file._EarlyPods.plan

    def early_plan(self: Any, data: Any) -> Any:
        result = plan(self, data)
        planned.append(result is not None)
        return result

    monkeypatch.setattr(snapshot_file._EarlyPods, "plan", early_plan)
    # When it is loaded, then the plan input is the one the same data as JSON gives, pods in order
    from_yaml = snapshot_file.load_snapshot(as_yaml)
    assert from_yaml == snapshot_file.load_snapshot(as_json)
    assert [p.name for p in from_yaml.pods] == [f"p-{i}" for i in range(60)]
    # and the YAML's pods were checked early, on the two-process path
    assert planned == [True, False] and in_pieces


@pytest.mark.parametrize("bad", [0, 59])
def test_a_bad_pod_in_a_yaml_read_in_pieces_is_named_as_in_json(in_pieces: list[int], tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch, bad: int) -> None:
    # Given a snapshot read in pieces with a negative request in its first or last pod
    monkeypatch.setattr(rapid_yaml, "PIECE_BYTES", 2000)
    as_yaml, as_json = _write_both(tmp_path, _big_snapshot(60, bad=bad))
    # When it is loaded, then the error names the pod's index exactly as for the same data as JSON
    with pytest.raises(ConfigError) as from_yaml:
        snapshot_file.load_snapshot(as_yaml)
    with pytest.raises(ConfigError) as from_json:
        snapshot_file.load_snapshot(as_json)
    assert f"pods[{bad}]" in str(from_yaml.value)
    assert str(from_yaml.value).replace("snap.yaml", "snap.json") == str(from_json.value)


@pytest.mark.parametrize("text", [
    "k:\n  - x\"y: 'a\n- b'\n- c\n- d\n",  # an opening quote after a plain key with a quote in it
    "k:\n  - 'a\n- b'\n- c\n- d\n",  # a quoted scalar of an indented list running onto a column-0 "item"
    "k:\n- 'a\n- b'\n- c\nm: 'x\nn: y'\n- d\n",  # the same at column 0, valid; and onto a column-0 "key"
    "k:\n  - [a,\n- b]\n- c\n- d\n",  # a flow collection running onto a column-0 "item"
    "k:\n  - \"a\\\n- b\"\n- c\n- d\n",  # a double-quoted scalar with an escaped line break
])
def test_no_cut_changes_what_a_document_reads_as(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    # Given a document whose column-0 lines are not all keys or items (which rapidyaml refuses too; the
    # check does not rely on that), cut wherever the piece size puts it
    assert rapid_yaml._open_reaches_column0(text, "\n".join(set(text.split("\n"))))
    monkeypatch.setattr(rapid_yaml, "PARALLEL_MIN_BYTES", 0)
    try:
        expected = yaml.safe_load(text)
    except yaml.YAMLError:
        expected = yaml.YAMLError
    for size in range(1, len(text)):
        monkeypatch.setattr(rapid_yaml, "PIECE_BYTES", size)
        # When it is read in pieces of that size, then it reads (or is refused) as safe_load does
        if expected is yaml.YAMLError:
            with pytest.raises(yaml.YAMLError):
                load_fast(text)
        else:
            assert _same(load_fast(text), expected), (size, text)


def test_beside_another_thread_the_pieces_are_converted_here(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given another thread running (it could hold a lock a forked helper would then wait on forever)
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        # When asked whether to fork, then no; and a document in pieces still reads as safe_load reads it
        assert not rapid_yaml._two_cores()
        monkeypatch.setattr(rapid_yaml, "PARALLEL_MIN_BYTES", 0)
        monkeypatch.setattr(rapid_yaml, "PIECE_BYTES", 60)
        text = "pods:\n" + "".join(_ITEM.format(i=i) for i in range(30))
        assert len(rapid_yaml.split(text)) > 1
        assert _same(rapid_yaml.load(text, resolve=_resolve), yaml.safe_load(text))
    finally:
        stop.set()
        thread.join()


def test_without_a_temporary_file_the_pieces_are_converted_here(in_pieces: list[int],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # Given no temporary file to be had for the helper's output (a full or read-only /tmp)
    def full(*_: Any, **__: Any) -> Any:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(rapid_yaml.tempfile, "TemporaryFile", full)
    text = "pods:\n" + "".join(_ITEM.format(i=i) for i in range(30))
    # When read, then rapidyaml still reads it, in this process, as safe_load does
    assert _same(rapid_yaml.load(text, resolve=_resolve), yaml.safe_load(text))
    assert not in_pieces


def _resolve(token: str) -> Any:
    return _FastBuilder().scalar(yaml.ScalarEvent(None, None, (True, False), token, style=""))


def test_every_cut_of_a_plain_document_keeps_it_on_rapidyaml(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a plain document of top-level lists, cut with every piece size (here converted in one process)
    monkeypatch.setattr(rapid_yaml, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(rapid_yaml, "_two_cores", lambda: False)
    items = "- a: 1\n  b: [x]\n# note\n" * 4
    text = "k:\n" + items + "m: 1\nn:\n" + items + "o:\n" + items
    for size in range(1, len(text)):
        monkeypatch.setattr(rapid_yaml, "PIECE_BYTES", size)
        # When read, then rapidyaml reads every piece (a list's piece ends where the next key starts)
        assert _same(rapid_yaml.load(text, resolve=_resolve), yaml.safe_load(text)), size


def _helper_statuses(pieces: list[str], **kwargs: Any) -> list[int]:
    """The status of each record the helper writes for ``pieces`` (run here, in this process)."""
    return [status for _, status in _helper_records(pieces, **kwargs)]


def _helper_records(pieces: list[str], **kwargs: Any) -> list[tuple[int, int]]:
    """(piece, status) of each record the helper writes for ``pieces`` (run here, in this process)."""
    queue, queue_in = os.pipe()
    os.write(queue_in, bytes(range(len(pieces))))
    os.close(queue_in)
    results, results_in = os.pipe()
    try:
        with tempfile.TemporaryFile() as out:
            rapid_yaml._helper(pieces, resolve=_resolve, queue=queue, results=results_in, out=out.fileno(),
                               **kwargs)
        os.close(results_in)
        records = []
        while (record := rapid_yaml._read_record(results)) is not None:
            records.append((record[0], record[1]))
        return records
    finally:
        os.close(queue)
        os.close(results)


@pytest.mark.parametrize(("pieces", "statuses"), [
    # every piece converted, no key twice: this process reads their JSON with plain json.loads
    (["pods:\n- name: a\n", "- name: b\n  labels: {x: 1, y: 2}\n"], [rapid_yaml._DONE, rapid_yaml._DONE]),
    # a key twice inside an item, and inside a flow mapping: the helper says so and stops
    (["pods:\n- name: a\n", "- name: b\n  name: c\n", "- name: d\n"], [rapid_yaml._DONE, rapid_yaml._DUPLICATE]),
    (["pods:\n- labels: {x: 1, x: 2}\n", "- name: d\n"], [rapid_yaml._DUPLICATE]),
    # a piece rapidyaml must not read
    (["pods:\n- flag: yes\n", "- name: d\n"], [rapid_yaml._DECLINED]),
])
def test_the_helper_finds_keys_given_twice_in_what_it_converts(pieces: list[str], statuses: list[int]) -> None:
    # Given pieces for the helper process, some holding a key twice in one mapping
    # When the helper converts them, then each record says whether its JSON may be read without a check
    assert _helper_statuses(pieces) == statuses


def test_a_key_twice_in_pieces_the_helper_converts_is_a_duplicate(in_pieces: list[int]) -> None:
    # Given a long list whose last item holds a key twice, read while this process is busy checking each
    # run of items (so the helper converts the later pieces, as it does for a large snapshot)
    text = "pods:\n" + "".join(f"- name: p{i}\n  uid: u{i}\n" for i in range(40)) + "- name: a\n  name: b\n"

    def checking(_: list[Any]) -> None:
        time.sleep(0.01)

    # When read in pieces on two cores, then the duplicate is reported with its line, never kept
    with pytest.raises(source_file.DuplicateKeysError) as caught:
        load_fast(text, on_list=checking)
    assert [p.line for p in caught.value.problems] == [text.count("\n")]
    assert not in_pieces  # the two-process path gave up on the duplicate


def test_runs_the_helper_checks_plan_as_the_json(in_pieces: list[int], tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a snapshot read in pieces while this process checks its runs of pods slowly, so that the helper,
    # done converting, checks runs from the end and sends their pods back
    monkeypatch.setattr(rapid_yaml, "PIECE_BYTES", 2000)
    as_yaml, as_json = _write_both(tmp_path, _big_snapshot(60))
    here, checked = snapshot_file._EarlyPods.__call__, snapshot_file._EarlyPods.checked
    checked_here: list[int] = []  # ids of the runs this process checked
    from_helper: list[int] = []  # the number of pods in each run the helper checked

    def slowly(self: Any, items: list[Any]) -> None:
        checked_here.append(id(items))
        time.sleep(0.05)
        here(self, items)

    def counted(self: Any, items: list[Any], result: Any) -> None:
        if id(items) not in checked_here:
            from_helper.append(len(result))
        checked(self, items, result)

    monkeypatch.setattr(snapshot_file._EarlyPods, "__call__", slowly)
    monkeypatch.setattr(snapshot_file._EarlyPods, "checked", counted)
    # When it is loaded, then the plan input is the JSON's, pods in order
    from_yaml = snapshot_file.load_snapshot(as_yaml)
    assert from_yaml == snapshot_file.load_snapshot(as_json)
    assert [p.name for p in from_yaml.pods] == [f"p-{i}" for i in range(60)]
    # and some runs of pods were checked by the helper, the rest here
    assert from_helper and sum(from_helper) < 60 and checked_here and in_pieces


class _Lengths:
    """A ListChecks whose check of a run is its length."""

    def __call__(self, items: list[Any]) -> None:
        pass

    def check(self, items: list[Any]) -> int:
        return len(items)

    def checked(self, items: list[Any], result: Any) -> None:
        pass


@pytest.mark.parametrize(("reached", "checked"), [(0, [4, 3, 2, 1]), (2, [4, 3]), (4, [])])
def test_the_helper_checks_runs_from_the_end_until_it_meets_this_process(reached: int, checked: list[int]) -> None:
    # Given five pieces converted by the helper, this process checking the run of piece ``reached``
    pieces = ["k:\n- a\n", *(f"- b{i}\n- c{i}\n" for i in range(4))]
    with mmap.mmap(-1, 1) as shared:
        shared[0] = reached
        # When the helper has converted them all, then it checks the runs after that one, the last first
        records = _helper_records(pieces, on_list=_Lengths(), reached=shared)
    assert records[:5] == [(n, rapid_yaml._DONE) for n in range(5)]
    assert records[5:] == [(n, rapid_yaml._CHECKED) for n in checked]
