"""The Lambda asset's hash follows the code, the dependencies and the cluster config (a config-only edit
must redeploy the functions); what ships is exactly the project's run-time dependencies, pruned of what
is never imported, with bytecode for the runtime's Python."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from autoscaler.config import load_cluster_config
from infra.bundling import (
    PLATFORMS,
    PYTHON_VERSION,
    BundlingError,
    asset_hash,
    compile_bytecode,
    prune,
    runtime_requirements,
    services_used,
    target_python,
)

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


def test_the_asset_keeps_only_the_botocore_models_of_services_the_code_calls(tmp_path: Path) -> None:
    # Given an installed tree with botocore models of used and unused services
    data = tmp_path / "botocore" / "data"
    for service in ("ec2", "eks", "sagemaker", "s3"):
        (data / service / "2020-01-01").mkdir(parents=True)
    (data / "endpoints.json").write_text("{}")
    (tmp_path / "aws_lambda_powertools" / "event_handler").mkdir(parents=True)
    # When it is pruned with the services the package creates clients for
    used = services_used()
    prune(tmp_path, services=used)
    # Then only those services' models and the shared files remain
    assert {"ec2", "eks", "ssm", "pricing", "sts", "lambda", "dynamodb", "autoscaling", "sqs"} <= used
    assert sorted(p.name for p in data.iterdir()) == ["ec2", "eks", "endpoints.json"]
    assert not (tmp_path / "aws_lambda_powertools" / "event_handler").exists()


def test_bytecode_is_compiled_by_the_runtime_python_and_never_checked_against_file_times(tmp_path: Path) -> None:
    # Given a Python of the Lambda runtime's version (skipped where none can be found or provided)
    try:
        python = target_python()
    except BundlingError as exc:
        pytest.skip(str(exc))
    (tmp_path / "mod.py").write_text("VALUE = 1\n")
    # When the tree is compiled
    compile_bytecode(tmp_path, python=python)
    # Then the .pyc carries the runtime's cache tag and is hash-based with source checks off (flags == 1):
    # the asset's zip resets every file's time, which would invalidate timestamp-based .pyc
    pyc = tmp_path / "__pycache__" / f"mod.cpython-{PYTHON_VERSION.replace('.', '')}.pyc"
    assert int.from_bytes(pyc.read_bytes()[4:8], "little") == 1


def test_the_handlers_never_import_the_kubernetes_client() -> None:
    # The official client stays a test dependency only: the functions talk raw JSON over KubeHttp.
    sources = [p.read_text(encoding="utf-8") for p in (ROOT / "functions").rglob("*.py")]
    assert not any(line.lstrip().startswith(("import kubernetes", "from kubernetes"))
                   for text in sources for line in text.splitlines())
    assert not any(r.startswith("kubernetes") for r in runtime_requirements())
