"""Synthesises the stack ONCE per test session for each of two cluster files (jsii synthesis is slow):
``demo`` (the example, defaults) and ``full`` (every optional setting on). cdk-nag runs in the same
synthesis through the app's own ``AwsSolutionsChecks`` aspect."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Annotations, Template

from autoscaler.config import ClusterConfig
from infra.app import build_app

ROOT = Path(__file__).resolve().parents[2]
FULL_CONFIG = Path(__file__).parent / "clusters" / "full.yaml"
# The same feature flags `cdk synth` uses, so tests see the template operators deploy.
CDK_CONTEXT: dict[str, Any] = json.loads((ROOT / "cdk.json").read_text())["context"]


@dataclass
class Synth:
    stack: cdk.Stack
    template: Template
    annotations: Annotations
    config: ClusterConfig

    @property
    def resources(self) -> dict[str, Any]:
        return dict(self.template.to_json()["Resources"])

    def of_type(self, kind: str) -> dict[str, dict[str, Any]]:
        return {k: v for k, v in self.resources.items() if v["Type"] == kind}

    def one(self, kind: str, prefix: str) -> tuple[str, dict[str, Any]]:
        found = [(k, v) for k, v in self.of_type(kind).items() if k.startswith(prefix)]
        assert len(found) == 1, f"expected one {kind} named {prefix}*, found {[k for k, _ in found]}"
        return found[0]


def _synth(**context: str) -> Synth:
    app = build_app(cdk.App(context={**CDK_CONTEXT, "skipBundling": "true", **context}))
    stack = next(c for c in app.node.children if isinstance(c, cdk.Stack))
    template = Template.from_stack(stack)
    return Synth(stack=stack, template=template, annotations=Annotations.from_stack(stack),
                 config=stack.config)  # type: ignore[attr-defined]


@pytest.fixture(scope="session")
def demo() -> Synth:
    return _synth(cluster="demo")


@pytest.fixture(scope="session")
def full() -> Synth:
    return _synth(configFile=str(FULL_CONFIG))


_LOGICAL_SUFFIX = re.compile(r"[0-9A-F]{8}$")


def _logical(name: str) -> str:
    return _LOGICAL_SUFFIX.sub("", name)


def render(value: Any) -> Any:
    """CloudFormation intrinsics as readable strings: {"Ref": "X1234ABCD"} -> "${X}", joins concatenated."""
    if isinstance(value, list):
        return [render(v) for v in value]
    if isinstance(value, dict):
        if "Ref" in value:
            return "${" + _logical(value["Ref"]) + "}"
        if "Fn::GetAtt" in value:
            resource, attribute = value["Fn::GetAtt"]
            return "${" + _logical(resource) + "." + attribute + "}"
        if "Fn::Join" in value:
            separator, parts = value["Fn::Join"]
            return separator.join(str(render(p)) for p in parts)
        if "Fn::Sub" in value:
            return value["Fn::Sub"]
        return {k: render(v) for k, v in value.items()}
    return value


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]
