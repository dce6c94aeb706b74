"""The CDK app: one stack per cluster file, named from the file's clusterName; unknown clusters fail clearly."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import aws_cdk as cdk
import pytest
import yaml

from autoscaler.config import ConfigError
from infra.app import build_app
from tests.infra.conftest import ROOT, Synth


def test_app_synthesises_the_stack_for_the_demo_cluster(demo: Synth) -> None:
    assert demo.stack.stack_name == "eks-autoscaler-demo"
    assert demo.stack.region == "us-west-2"
    demo.template.has_resource_properties("AWS::SQS::Queue", {"MessageRetentionPeriod": 300})


def test_unknown_cluster_names_the_file_and_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError) as exc:
        build_app(cdk.App(context={"cluster": "nope", "skipBundling": "true"}))
    assert str(exc.value) == "clusters/nope.yaml: no such cluster file; known clusters: demo"


def test_synth_fails_on_a_bad_cluster_file_naming_the_field(tmp_path: Path) -> None:
    data = yaml.safe_load((ROOT / "clusters" / "demo.yaml").read_text())
    data["nodePools"][0]["spec"]["limits"]["cpu"] = "a lot"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data))
    env = {**os.environ, "CDK_CONTEXT_JSON": json.dumps({"configFile": str(bad), "skipBundling": "true"}),
           "CDK_OUTDIR": str(tmp_path / "out")}
    result = subprocess.run([sys.executable, str(ROOT / "infra" / "app.py")], env=env, capture_output=True,
                            text=True, check=False)
    assert result.returncode == 1
    # file:line: object: field: message (docs/configuration.md "Validation")
    assert re.search(rf"error: {re.escape(str(bad))}:\d+: NodePool default: spec\.limits\.cpu: 'a lot' is not a "
                     "quantity", result.stderr), result.stderr
