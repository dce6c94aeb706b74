"""The Lambda code asset, built without Docker.

``pip install --platform`` fetches the locked run-time dependencies (``requirements/lambda.txt``, exported
from ``uv.lock`` by ``make lock``, every wheel checked against its hash) as wheels built for the Lambda
platform (Linux arm64) into the asset, next to a copy of ``functions/autoscaler`` and the cluster's
configuration (``autoscaler/cluster.json``). One asset serves all three functions.

Cold start is mostly imports, so the asset is built for them. What is never imported at run time is
left out: the kubernetes client's generated API classes and models (the adapter reads raw JSON; the
client's package ``__init__`` exports them lazily, so only an attribute access would load one), its
asyncio client (``kubernetes.aio``) with aiohttp and its dependencies, botocore's models of services no
code creates a client for, Powertools' event handler. ``benchmarks/bundle.py`` lists what each handler
imports, and ``KUBERNETES_KEEP`` is what a real pass was seen importing (``python -X importtime``).

Bytecode: a ``.pyc`` is only read by the CPython minor version that wrote it, so every module is compiled
by a Python of the runtime's version (``PYTHON_VERSION``), which the build finds by itself: the packaging
interpreter if it is that version, else a working ``python3.13`` on PATH, else one installed by pyenv
(the project's machines have it; docs/deploy.md). None found, or a module left without its ``.pyc``, stops
the build: it never ships sources only. It is compiled in ``unchecked-hash`` mode: the asset's zip resets
file times, so timestamp-checked ``.pyc`` would be recompiled on every cold start and never written back
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
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import jsii
from aws_cdk import aws_lambda as lambda_

from autoscaler.config import BUNDLED_CONFIG, ClusterConfig

ROOT = Path(__file__).resolve().parent.parent
FUNCTIONS = ROOT / "functions"
PACKAGE = FUNCTIONS / "autoscaler"
# The functions' runtime: supported by Lambda until 2029 (python3.11's updates are blocked since August 2026),
# and every dependency ships arm64 wheels for it.
PYTHON_VERSION = "3.13"
RUNTIME = lambda_.Runtime.PYTHON_3_13
# The run-time dependencies, pinned with hashes (make lock writes it from uv.lock).
LOCK = ROOT / "requirements" / "lambda.txt"
# Lambda's python3.11+ runtimes are Amazon Linux 2023 (glibc 2.34): both wheel generations run there.
PLATFORMS = ("manylinux2014_aarch64", "manylinux_2_28_aarch64")
CONFIG_NAME = BUNDLED_CONFIG.name
# Changes whenever how the asset is built changes (pruning, bytecode), so the asset is rebuilt.
BUNDLE_FORMAT = "locked+pruned+pyc-unchecked-hash"
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


def _minor_version(python: str) -> str | None:
    try:
        out = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                             capture_output=True, text=True, check=False, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _candidates() -> list[str]:
    found = [sys.executable]
    on_path = shutil.which(f"python{PYTHON_VERSION}")
    if on_path:
        found.append(on_path)
    pyenv_root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    found += [str(p) for p in sorted((pyenv_root / "versions").glob(f"{PYTHON_VERSION}.*/bin/python{PYTHON_VERSION}"),
                                      reverse=True)]
    return found


def pyc_python() -> str:
    """A Python of the runtime's version to compile the bytecode with (module docstring), or BundlingError
    saying what was tried and how to provide one."""
    candidates = _candidates()
    for python in candidates:
        if _minor_version(python) == PYTHON_VERSION:
            return python
    raise BundlingError(f"no Python {PYTHON_VERSION} to compile the Lambda asset's bytecode with (tried "
                        f"{', '.join(candidates)}): the {RUNTIME.name} runtime reads only {PYTHON_VERSION} bytecode. "
                        f"Install one (pyenv install {PYTHON_VERSION}, or your OS's python{PYTHON_VERSION}) so that "
                        f"python{PYTHON_VERSION} runs, then make package again")


def runtime_requirements() -> list[str]:
    """The locked run-time dependencies (``name==version``, in ``requirements/lambda.txt``): exactly what ships."""
    if not LOCK.is_file():
        raise BundlingError(f"{LOCK.relative_to(ROOT)} is missing: run make lock")
    return [line.split(" ", 1)[0].split(";", 1)[0].strip() for line in LOCK.read_text(encoding="utf-8").splitlines()
            if line and not line[0].isspace() and not line.startswith("#")]


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
    digest.update(LOCK.read_bytes())
    digest.update("\n".join([PYTHON_VERSION, *PLATFORMS, BUNDLE_FORMAT]).encode())
    digest.update(config.to_json().encode())
    return digest.hexdigest()


def services_used() -> frozenset[str]:
    """Every AWS service the functions create a client for (``.client("ec2", ...)`` in the package)."""
    return frozenset(m for path in _source_files() if path.suffix == ".py"
                     for m in _CLIENT_CALL.findall(path.read_text(encoding="utf-8")))


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
    """``__pycache__/*.cpython-313.pyc`` for every module, by ``python`` (the runtime's version), valid
    whatever the files' times; BundlingError if compileall fails or any module is left without its ``.pyc``."""
    result = subprocess.run([python, "-m", "compileall", "-q", "-j", "0", "--invalidation-mode", "unchecked-hash",
                             str(output_dir)], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise BundlingError(f"compileall failed in {output_dir}:\n{(result.stdout + result.stderr).strip()[-2000:]}")
    tag = f"cpython-{PYTHON_VERSION.replace('.', '')}"
    missing = [str(p.relative_to(output_dir)) for p in output_dir.rglob("*.py")
               if not (p.parent / "__pycache__" / f"{p.stem}.{tag}.pyc").is_file()]
    if missing:
        raise BundlingError(f"{len(missing)} module(s) got no {tag} bytecode, e.g. {', '.join(missing[:5])}")


def build_asset(output_dir: Path, config: ClusterConfig, *, platforms: tuple[str, ...] = PLATFORMS,
                python: str | None = None, compile_pyc: bool = True) -> None:
    """Install the locked dependencies for the Lambda platform into ``output_dir``, copy the package and
    config, prune what is never imported and compile the bytecode. ``platforms``: other wheels than
    Lambda's (the import benchmark builds the same asset for this machine); ``python``: the interpreter to
    compile with (default: ``pyc_python()``); ``compile_pyc=False``: sources only (the benchmark's
    comparison, never deployed)."""
    compiler = (python or pyc_python()) if compile_pyc else None
    pip_platforms = [arg for platform in platforms for arg in ("--platform", platform)]
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile",
               "--no-deps", "--require-hashes", *pip_platforms, "--implementation", "cp", "--python-version",
               PYTHON_VERSION, "--only-binary=:all:", "--target", str(output_dir), "-r", str(LOCK)]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise BundlingError(f"pip could not install the Lambda dependencies:\n{result.stderr.strip()}")
    target = output_dir / "autoscaler"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(PACKAGE, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", CONFIG_NAME))
    (target / CONFIG_NAME).write_text(config.to_json(), encoding="utf-8")
    prune(output_dir, services=services_used())
    if compiler is not None:
        compile_bytecode(output_dir, python=compiler)


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
