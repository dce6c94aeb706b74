"""The Lambda code asset, built without Docker.

``pip install --platform`` fetches the runtime dependencies as wheels built for the Lambda platform
(Linux arm64, CPython 3.13) into the asset, next to a copy of ``functions/autoscaler`` and the cluster's
configuration (``autoscaler/cluster.json``). One asset serves all three functions.

Cold start is mostly imports, so the asset is built for them. What is never imported at run time is
left out: the kubernetes client's generated API classes and models (the adapter reads raw JSON; the
client's package ``__init__`` exports them lazily, so only an attribute access would load one), its
asyncio client (``kubernetes.aio``) with aiohttp and its dependencies, botocore's models of services no
code creates a client for, Powertools' event handler. ``benchmarks/bundle.py`` lists what each handler
imports, and ``KUBERNETES_KEEP`` is what a real pass was seen importing (``python -X importtime``).

Bytecode: a ``.pyc`` is only read by the CPython minor version that wrote it, so it is compiled by a
Python of the runtime's version when one is available (``$AUTOSCALER_PYC_PYTHON``, the packaging
interpreter itself, or ``python3.13`` on PATH); otherwise the asset ships sources only and the build
says so. It is compiled in ``unchecked-hash`` mode: the asset's zip resets file times, so
timestamp-checked ``.pyc`` would be recompiled on every cold start and never written back
(``/var/task`` is read-only).

Unit tests and ``make synth`` pass ``-c skipBundling=true``: the asset is then the bare ``functions/``
directory, which synthesises the same template in a second but is not deployable.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tomllib
import warnings
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
# Changes whenever how the asset is built changes (pruning, bytecode), so the asset is rebuilt.
BUNDLE_FORMAT = "pruned+pyc-unchecked-hash"
ENV_PYTHON = "AUTOSCALER_PYC_PYTHON"
# Never imported by the handlers (checked by ``python -X importtime`` in benchmarks/bundle.py).
UNUSED_PATHS = ("aws_lambda_powertools/event_handler", "bin", "kubernetes/aio", "aiohttp", "aiohappyeyeballs",
                "aiohttp_retry", "aiosignal", "frozenlist", "multidict", "propcache", "yarl")
# The kubernetes client's generated code: only these modules are kept (a provisioner, interruption and
# disruption pass import none of the others: the client exports them lazily and the adapter parses raw
# JSON). The packages' ``__init__`` stay, as ``api_client`` imports ``kubernetes.client.models``.
KUBERNETES_GENERATED = ("kubernetes/client/api", "kubernetes/client/models")
KUBERNETES_KEEP = frozenset({"__init__.py"})
# botocore data a client needs beyond its service's own directory.
BOTOCORE_SHARED = frozenset({"_retry.json", "endpoints.json", "partitions.json", "sdk-default-configuration.json"})
_CLIENT_CALL = re.compile(r"""\.client\(\s*["']([a-z0-9-]+)["']""")


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
    digest.update("\n".join([*runtime_requirements(), PYTHON_VERSION, *PLATFORMS, BUNDLE_FORMAT]).encode())
    digest.update(config.to_json().encode())
    return digest.hexdigest()


def services_used() -> frozenset[str]:
    """Every AWS service the functions create a client for (``.client("ec2", ...)`` in the package)."""
    return frozenset(m for path in _source_files() if path.suffix == ".py"
                     for m in _CLIENT_CALL.findall(path.read_text(encoding="utf-8")))


def _minor_version(python: str) -> str | None:
    try:
        out = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                             capture_output=True, text=True, check=False, timeout=30)
    except OSError:
        return None
    return out.stdout.strip() or None


def pyc_python() -> str | None:
    """A Python of the runtime's version to compile the bytecode with, or None when there is none."""
    explicit = os.environ.get(ENV_PYTHON)
    if explicit:
        found = _minor_version(explicit)
        if found != PYTHON_VERSION:
            raise BundlingError(f"{ENV_PYTHON}={explicit} is Python {found or '(not runnable)'}, not "
                                f"{PYTHON_VERSION}: the Lambda runtime would ignore its bytecode; unset it or "
                                f"point it at a python{PYTHON_VERSION}")
        return explicit
    if f"{sys.version_info[0]}.{sys.version_info[1]}" == PYTHON_VERSION:
        return sys.executable
    on_path = shutil.which(f"python{PYTHON_VERSION}")
    if on_path and _minor_version(on_path) == PYTHON_VERSION:
        return on_path
    return None


def prune(output_dir: Path, *, services: frozenset[str]) -> None:
    """Remove what the handlers never import: ``UNUSED_PATHS``, the kubernetes client's generated modules
    but ``KUBERNETES_KEEP``, its tests, and other services' botocore models."""
    for rel in UNUSED_PATHS:
        shutil.rmtree(output_dir / rel, ignore_errors=True)
    for rel in KUBERNETES_GENERATED:
        generated = output_dir / rel
        if generated.is_dir():
            for entry in generated.iterdir():
                if entry.name not in KUBERNETES_KEEP:
                    shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    kubernetes = output_dir / "kubernetes"
    if kubernetes.is_dir():
        for test in kubernetes.rglob("*_test.py"):
            test.unlink()
    data = output_dir / "botocore" / "data"
    if data.is_dir():
        for entry in data.iterdir():
            if entry.name not in services and entry.name not in BOTOCORE_SHARED:
                shutil.rmtree(entry) if entry.is_dir() else entry.unlink()


def compile_bytecode(output_dir: Path, *, python: str) -> None:
    """``__pycache__/*.cpython-313.pyc`` for every module, valid whatever the files' times."""
    result = subprocess.run([python, "-m", "compileall", "-q", "-j", "0", "--invalidation-mode", "unchecked-hash",
                             str(output_dir)], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise BundlingError(f"compileall failed in {output_dir}:\n{(result.stdout + result.stderr).strip()[-2000:]}")


def build_asset(output_dir: Path, config: ClusterConfig, *, platforms: tuple[str, ...] = PLATFORMS,
                python: str | None = None, compile_pyc: bool = True) -> bool:
    """Install dependencies for the Lambda platform into ``output_dir``, copy the package and config,
    prune what is never imported and compile the bytecode; returns whether ``.pyc`` were compiled.
    ``platforms``: other wheels than Lambda's (the import benchmark builds the same asset for this
    machine); ``python``: the interpreter to compile with (default: ``pyc_python()``)."""
    compiler = (python or pyc_python()) if compile_pyc else None
    pip_platforms = [arg for platform in platforms for arg in ("--platform", platform)]
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile",
               *pip_platforms, "--implementation", "cp", "--python-version", PYTHON_VERSION,
               "--only-binary=:all:", "--target", str(output_dir), *runtime_requirements()]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise BundlingError(f"pip could not install the Lambda dependencies:\n{result.stderr.strip()}")
    target = output_dir / "autoscaler"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(PACKAGE, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", CONFIG_NAME))
    (target / CONFIG_NAME).write_text(config.to_json(), encoding="utf-8")
    prune(output_dir, services=services_used())
    if compiler is None:
        if compile_pyc:
            warnings.warn(f"no Python {PYTHON_VERSION} to compile the bytecode with: the Lambda asset ships "
                          f"sources only, and every cold start compiles them (about 3x slower imports). Set "
                          f"{ENV_PYTHON} to a python{PYTHON_VERSION} to ship .pyc.", stacklevel=2)
        return False
    compile_bytecode(output_dir, python=compiler)
    return True


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
