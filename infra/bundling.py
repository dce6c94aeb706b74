"""The Lambda code asset, built without Docker.

``pip install --platform`` fetches the runtime dependencies as wheels built for the Lambda platform
(Linux arm64, CPython 3.13) into the asset, next to a copy of ``functions/autoscaler`` and the cluster's
configuration (``autoscaler/cluster.json``). One asset serves all three functions.

Unit tests and ``make synth`` pass ``-c skipBundling=true``: the asset is then the bare ``functions/``
directory, which synthesises the same template in a second but is not deployable.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import jsii
from aws_cdk import aws_lambda as lambda_

from autoscaler.config import BUNDLED_CONFIG, ClusterConfig

ROOT = Path(__file__).resolve().parent.parent
FUNCTIONS = ROOT / "functions"
PACKAGE = FUNCTIONS / "autoscaler"
PYTHON_VERSION = "3.13"
# Lambda's python3.13 runtime is Amazon Linux 2023 (glibc 2.34): both wheel generations run there.
PLATFORMS = ("manylinux2014_aarch64", "manylinux_2_28_aarch64")
CONFIG_NAME = BUNDLED_CONFIG.name


class BundlingError(RuntimeError):
    """The asset could not be built; the message says which step failed."""


def runtime_requirements() -> list[str]:
    """The project's run-time dependencies (pyproject ``[project].dependencies``): exactly what ships."""
    with (ROOT / "pyproject.toml").open("rb") as fh:
        return list(tomllib.load(fh)["project"]["dependencies"])


def _source_files() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts and p.name != CONFIG_NAME)


def asset_hash(config: ClusterConfig) -> str:
    """Changes whenever the code, the dependencies or the cluster configuration change, so a config-only
    edit still redeploys the functions (a source hash of ``functions/`` alone would miss it)."""
    digest = hashlib.sha256()
    for path in _source_files():
        digest.update(str(path.relative_to(FUNCTIONS)).encode())
        digest.update(path.read_bytes())
    digest.update("\n".join([*runtime_requirements(), PYTHON_VERSION, *PLATFORMS]).encode())
    digest.update(config.to_json().encode())
    return digest.hexdigest()


def build_asset(output_dir: Path, config: ClusterConfig) -> None:
    """Install dependencies for the Lambda platform into ``output_dir`` and copy the package and config."""
    platforms = [arg for platform in PLATFORMS for arg in ("--platform", platform)]
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile",
               *platforms, "--implementation", "cp", "--python-version", PYTHON_VERSION,
               "--only-binary=:all:", "--target", str(output_dir), *runtime_requirements()]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise BundlingError(f"pip could not install the Lambda dependencies:\n{result.stderr.strip()}")
    target = output_dir / "autoscaler"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(PACKAGE, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", CONFIG_NAME))
    (target / CONFIG_NAME).write_text(config.to_json(), encoding="utf-8")


@jsii.implements(cdk.ILocalBundling)
class _LocalBundling:
    def __init__(self, config: ClusterConfig) -> None:
        self._config = config

    def try_bundle(self, output_dir: str, *, image: Any = None, **_: Any) -> bool:
        build_asset(Path(output_dir), self._config)
        return True


def lambda_code(config: ClusterConfig, *, skip_bundling: bool) -> lambda_.Code:
    """The code asset shared by the three functions."""
    if skip_bundling:
        return lambda_.Code.from_asset(str(FUNCTIONS), exclude=["**/__pycache__", "*.pyc"])
    return lambda_.Code.from_asset(
        str(FUNCTIONS),
        asset_hash=asset_hash(config),
        asset_hash_type=cdk.AssetHashType.CUSTOM,
        bundling=cdk.BundlingOptions(
            # Never pulled: local bundling always succeeds or raises, so Docker is not needed.
            image=cdk.DockerImage.from_registry("unused-local-bundling-only"),
            local=_LocalBundling(config),
        ),
    )
