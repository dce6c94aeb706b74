"""The fast YAML path of ``autoscaler plan`` and ``validate`` on large files (libyaml's event stream built
into values) reads every document exactly as ``yaml.safe_load`` does, value for value and type for type,
and rejects a key given twice with the message and lines ``autoscaler validate`` gives."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler import source_file
from autoscaler.cli import main
from autoscaler.source_file import DuplicateKeysError, EventBuilder, load_fast

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


SHAPES = ["a: {t}\n", "- {t}\n", "[{t}, x]\n", "{{k: {t}}}\n", "{t}: v\n", "m:\n  {t}: v\n  w: 1\n", "a: '{t}'\n",
          'a: "{t}"\n', "a:\n  - - {t}\n"]


def test_every_scalar_reads_as_safe_load_reads_it() -> None:
    # Given every plain, quoted, key or item scalar that YAML 1.1 and 1.2 may read differently
    read = 0
    for shape in SHAPES:
        for token in TOKENS:
            # When the fast loader reads it, then the value and its type (or the refusal) are safe_load's
            read += _reads_as_safe_load(shape.format(t=token))
    assert read > len(SHAPES) * len(TOKENS) * 0.9


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
    # a pod's name twice, inside a list
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
    assert _same(EventBuilder().load(SNAPSHOT), data)
