"""docs/simulation.md documents the scenario language completely: its example scenario is one the parser
accepts, and every key the parser accepts (``simulator/sim/scenario.py``'s models, walked recursively) is
named in the document, so a key added to the parser without its documentation fails here."""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from simulator.sim.scenario import Scenario

DOC = Path(__file__).resolve().parents[2] / "docs" / "simulation.md"
INTERNAL = {"source"}  # set by load_scenario from the file's path, not written by a user


def _models(annotation: Any) -> Iterator[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
        return
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is not None:
        for arg in typing.get_args(annotation):
            yield from _models(arg)


def accepted_keys(model: type[BaseModel], path: str = "") -> Iterator[tuple[str, str]]:
    """(dotted path, key) of every key ``model`` accepts, as a scenario file spells it (camelCase)."""
    for name, info in model.model_fields.items():
        key = info.alias or name
        if not path and key in INTERNAL:
            continue
        where = f"{path}.{key}" if path else key
        yield where, key
        for sub in _models(info.annotation):
            yield from accepted_keys(sub, where)


def _example() -> dict[str, Any]:
    text = DOC.read_text()
    section = text[text.index("## The scenario file"):]
    block = section[section.index("```yaml") + len("```yaml"):]
    return yaml.safe_load(block[:block.index("```")])  # type: ignore[no-any-return]


def _placeholders_filled(value: Any) -> Any:
    """The example's ``<manifest>`` placeholders (and ``[...]``) as empty manifests."""
    if isinstance(value, dict):
        return {k: _placeholders_filled(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_placeholders_filled(v) for v in value if v != "..."]
    if isinstance(value, str) and value.startswith("<"):
        return {}
    return value


def test_the_documented_example_is_a_scenario_the_parser_accepts() -> None:
    example = _placeholders_filled(_example())
    for step in example["timeline"]:  # "<manifest>" lists: a list of manifests
        if step.get("nodePools") == {}:
            step["nodePools"] = [{}]
    example["initial"]["objects"] = [o for o in example["initial"]["objects"] if o]
    scenario = Scenario.model_validate(example)
    assert scenario.timeline and scenario.assertions


def test_every_key_the_parser_accepts_is_documented() -> None:
    text = DOC.read_text()
    missing = [where for where, key in accepted_keys(Scenario)
               if not re.search(rf"(`{re.escape(key)}`|\b{re.escape(key)}:|`{re.escape(key)}[ :=,}}])", text)]
    assert missing == [], f"docs/simulation.md does not name these scenario keys: {missing}"


def test_the_check_finds_an_undocumented_key() -> None:
    # The walk reaches nested models (a target field of a fault, a setting, a baseline knob)
    keys = dict(accepted_keys(Scenario))
    assert keys["timeline.interrupt.owner"] == "owner"
    assert keys["settings.volumeForceDetachSeconds"] == "volumeForceDetachSeconds"
    assert keys["baseline.skipNodesWithLocalStorage"] == "skipNodesWithLocalStorage"
    assert keys["assertions.ratioToBaseline.max"] == "max"
