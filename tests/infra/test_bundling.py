"""The Lambda asset's hash follows the code, the dependencies and the cluster config (a config-only edit
must redeploy the functions); what ships is exactly the project's run-time dependencies, pruned of what
is never imported, with bytecode for the runtime's Python."""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

import pytest

from autoscaler.config import load_cluster_config
from infra.bundling import (
    LOCK,
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


def _locked_versions() -> dict[str, str]:
    with (ROOT / "uv.lock").open("rb") as fh:
        return {p["name"]: p["version"] for p in tomllib.load(fh)["package"] if "version" in p}


def _name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def test_ships_the_locked_runtime_dependencies_for_lambda_arm64() -> None:
    # Given the project's run-time dependencies and the lock
    with (ROOT / "pyproject.toml").open("rb") as fh:
        declared = {_name(r) for r in tomllib.load(fh)["project"]["dependencies"]}
    locked = _locked_versions()
    shipped = dict(r.split("==") for r in runtime_requirements())
    # Then what ships is pinned, includes every declared dependency, and is the lock's version of each
    # (requirements/lambda.txt is stale otherwise: make lock)
    assert declared <= set(shipped), f"not in {LOCK.name}: {declared - set(shipped)} (run make lock)"
    stale = {n: (v, locked.get(n)) for n, v in shipped.items() if locked.get(n) != v}
    assert not stale, f"{LOCK.name} disagrees with uv.lock (run make lock): {stale}"
    # and nothing of the CDK app, the tests or the demo
    assert not set(shipped) & {"aws-cdk-lib", "cdk-nag", "pytest", "moto", "matplotlib"}
    # and every requirement carries hashes, so pip checks each arm64 wheel it fetches
    lines = LOCK.read_text(encoding="utf-8").splitlines()
    unhashed = [line for line, after in zip(lines, [*lines[1:], ""], strict=True)
                if "==" in line and not after.strip().startswith("--hash=sha256:")]
    assert not unhashed
    assert all(p.endswith("_aarch64") for p in PLATFORMS)


def test_the_lock_carries_the_hashes_of_the_arm64_wheels_that_ship() -> None:
    # Given the lock's entry of a dependency with native code (pydantic-core)
    with (ROOT / "uv.lock").open("rb") as fh:
        packages = {p["name"]: p for p in tomllib.load(fh)["package"]}
    wheels = packages["pydantic-core"]["wheels"]
    tag = f"cp{PYTHON_VERSION.replace('.', '')}"
    arm64 = [w for w in wheels if tag in w["url"] and "manylinux" in w["url"] and "aarch64" in w["url"]]
    # Then the Lambda's wheel is there with its hash, and so is requirements/lambda.txt's line for it
    assert arm64 and all(w["hash"].startswith("sha256:") for w in arm64)
    assert arm64[0]["hash"].removeprefix("sha256:") in LOCK.read_text(encoding="utf-8")


def test_without_a_python_of_the_runtime_version_the_build_stops_and_says_how_to_get_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a machine whose only Pythons are of another version than the runtime's
    monkeypatch.setattr("infra.bundling._candidates", lambda: [sys.executable])
    monkeypatch.setattr("infra.bundling.PYTHON_VERSION", "3.99")
    # Then the build stops (never ships sources only), naming what it tried and how to provide one
    expected = rf"no Python 3\.99 .*tried {re.escape(sys.executable)}.*pyenv install 3\.99"
    with pytest.raises(BundlingError, match=expected):
        pyc_python()


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


@pytest.fixture(scope="module")
def runtime_python() -> str:
    try:
        return pyc_python()
    except BundlingError as exc:
        pytest.skip(str(exc))


def test_bytecode_is_compiled_for_every_module_and_never_checked_against_file_times(
        tmp_path: Path, runtime_python: str) -> None:
    (tmp_path / "mod.py").write_text("VALUE = 1\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    # When the tree is compiled by the runtime's Python (found without any setting)
    compile_bytecode(tmp_path, python=runtime_python)
    # Then each .pyc carries the runtime's cache tag and is hash-based with source checks off (flags == 1):
    # the asset's zip resets every file's time, which would invalidate timestamp-based .pyc
    tag = f"cpython-{PYTHON_VERSION.replace('.', '')}"
    for pyc in (tmp_path / "__pycache__" / f"mod.{tag}.pyc", tmp_path / "pkg" / "__pycache__" / f"__init__.{tag}.pyc"):
        assert int.from_bytes(pyc.read_bytes()[4:8], "little") == 1


def test_a_module_that_does_not_compile_stops_the_build(tmp_path: Path, runtime_python: str) -> None:
    # Given a module with a syntax error
    (tmp_path / "broken.py").write_text("def (:\n")
    # Then the build fails loudly, naming it, instead of shipping it without bytecode
    with pytest.raises(BundlingError, match="compileall failed"):
        compile_bytecode(tmp_path, python=runtime_python)
