"""The Lambda asset's hash follows the code, the dependencies and the cluster config (a config-only edit
must redeploy the functions); what ships is exactly the project's run-time dependencies."""

from __future__ import annotations

import tomllib
from pathlib import Path

from autoscaler.config import load_cluster_config
from infra.bundling import PLATFORMS, PYTHON_VERSION, asset_hash, runtime_requirements

ROOT = Path(__file__).resolve().parents[2]


def test_asset_hash_is_stable_and_follows_the_config() -> None:
    config = load_cluster_config(ROOT / "clusters" / "demo.yaml")
    assert asset_hash(config) == asset_hash(config)
    changed = config.model_copy(update={"log_retention_days": 90})
    assert asset_hash(changed) != asset_hash(config)


def test_ships_the_runtime_dependencies_for_lambda_arm64() -> None:
    with (ROOT / "pyproject.toml").open("rb") as fh:
        assert runtime_requirements() == tomllib.load(fh)["project"]["dependencies"]
    assert not any(r.startswith(("aws-cdk", "cdk-nag", "pytest", "moto")) for r in runtime_requirements())
    assert PYTHON_VERSION == "3.13" and all(p.endswith("_aarch64") for p in PLATFORMS)
