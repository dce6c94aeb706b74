"""The Lambda asset's hash follows the code, the dependencies and the cluster config (a config-only edit
must redeploy the functions); what ships is exactly the project's run-time dependencies, pruned of what
is never imported, with bytecode for the runtime's Python."""

from __future__ import annotations

import sys
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
    pyc_python,
    runtime_requirements,
    services_used,
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
    # and the kubernetes client with its generated code, its asyncio client and aiohttp
    client = tmp_path / "kubernetes" / "client"
    for rel in ("api/__init__.py", "api/core_v1_api.py", "models/__init__.py", "models/v1_pod.py",
                "api_client.py", "rest.py"):
        (client / rel).parent.mkdir(parents=True, exist_ok=True)
        (client / rel).write_text("")
    (tmp_path / "kubernetes" / "aio" / "client").mkdir(parents=True)
    (tmp_path / "kubernetes" / "watch").mkdir()
    (tmp_path / "kubernetes" / "watch" / "watch_test.py").write_text("")
    (tmp_path / "aiohttp").mkdir()
    # When it is pruned with the services the package creates clients for
    used = services_used()
    prune(tmp_path, services=used)
    # Then only those services' models and the shared files remain
    assert {"ec2", "eks", "ssm", "pricing", "sts", "lambda", "dynamodb", "autoscaling", "sqs"} <= used
    assert sorted(p.name for p in data.iterdir()) == ["ec2", "eks", "endpoints.json"]
    assert not (tmp_path / "aws_lambda_powertools" / "event_handler").exists()
    # and the client keeps what a pass imports: its core modules and the generated packages' __init__
    assert sorted(str(p.relative_to(client)) for p in client.rglob("*.py")) == [
        "api/__init__.py", "api_client.py", "models/__init__.py", "rest.py"]
    assert not (tmp_path / "kubernetes" / "aio").exists() and not (tmp_path / "aiohttp").exists()
    assert not (tmp_path / "kubernetes" / "watch" / "watch_test.py").exists()


def test_bytecode_is_compiled_by_the_runtime_python_and_never_checked_against_file_times(tmp_path: Path) -> None:
    # Given a Python of the Lambda runtime's version (skipped where there is none)
    python = pyc_python()
    if python is None:
        pytest.skip(f"no python{PYTHON_VERSION} here (set AUTOSCALER_PYC_PYTHON)")
    (tmp_path / "mod.py").write_text("VALUE = 1\n")
    # When the tree is compiled
    compile_bytecode(tmp_path, python=python)
    # Then the .pyc carries the runtime's cache tag and is hash-based with source checks off (flags == 1):
    # the asset's zip resets every file's time, which would invalidate timestamp-based .pyc
    pyc = tmp_path / "__pycache__" / f"mod.cpython-{PYTHON_VERSION.replace('.', '')}.pyc"
    assert int.from_bytes(pyc.read_bytes()[4:8], "little") == 1


def test_without_a_python_of_the_runtime_version_the_asset_ships_sources_and_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given an AUTOSCALER_PYC_PYTHON of another version than the runtime's
    monkeypatch.setenv("AUTOSCALER_PYC_PYTHON", sys.executable)
    if f"{sys.version_info[0]}.{sys.version_info[1]}" == PYTHON_VERSION:
        pytest.skip("the test interpreter is the runtime's version")
    # Then the build refuses it, naming the variable and both versions
    with pytest.raises(BundlingError, match=rf"AUTOSCALER_PYC_PYTHON=.* is Python 3\.\d+, not {PYTHON_VERSION}"):
        pyc_python()
