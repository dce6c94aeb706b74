"""Bundle size and cold-start imports: builds the Lambda asset exactly as ``make package`` does
(``infra/bundling.build_asset``: pruned, bytecode compiled by a Python of the runtime's version) and
measures it. Needs such a Python (``$AUTOSCALER_PYC_PYTHON``, or ``python3.13`` on PATH): without one the
imports cannot be measured as Lambda runs them, and only the size is reported.

Reported: the arm64 asset's unzipped size (what ships); then, for the same asset built with this
machine's wheels (arm64 native libraries cannot load here), each handler's import time in a fresh
``python3.13`` process with and without the bytecode (median of ``--runs``), under Lambda's environment
variables (the X-Ray recorder, for one, behaves differently inside Lambda), and which top-level
packages each handler imports (``-X importtime``), checked against what the asset dropped.
Prints ONE JSON object.

    python benchmarks/bundle.py [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "functions"), str(ROOT)]

from autoscaler.config import load_cluster_config  # noqa: E402
from infra.bundling import PLATFORMS, UNUSED_PATHS, build_asset, pyc_python  # noqa: E402
from infra.functions import HANDLERS  # noqa: E402

HOST_PLATFORMS = {"x86_64": ("manylinux2014_x86_64", "manylinux_2_28_x86_64"),
                  "aarch64": PLATFORMS}
LAMBDA_ENV = {"AWS_LAMBDA_FUNCTION_NAME": "bench", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "1024",
              "AWS_REGION": "eu-west-1", "AWS_DEFAULT_REGION": "eu-west-1",
              "AWS_EXECUTION_ENV": "AWS_Lambda_python3.13",
              "POWERTOOLS_SERVICE_NAME": "bench", "POWERTOOLS_METRICS_NAMESPACE": "bench"}
# The measured statement runs in the child: the interpreter's own start-up is not an import of ours.
# CPU time beside wall time: on a shared, loaded machine the wall time mostly measures the neighbours.
PROBE = ("import time, sys; t, c = time.perf_counter(), time.process_time(); import {module}; "
         "sys.stdout.write(repr((time.perf_counter() - t, time.process_time() - c)))")


def _size(path: Path) -> tuple[int, int]:
    files = [p for p in path.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files), len(files)


def _import_seconds(python: str, bundle: Path, module: str, *, pyc: bool) -> tuple[float, float]:
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(bundle), "LAMBDA_TASK_ROOT": str(bundle),
           **LAMBDA_ENV}
    if not pyc:
        env["PYTHONDONTWRITEBYTECODE"] = "1"  # as on Lambda: /var/task is read-only
    out = subprocess.run([python, "-c", PROBE.format(module=module)], cwd=bundle, env=env, capture_output=True,
                         text=True, check=True)
    wall, cpu = out.stdout.strip("()").split(",")
    return float(wall), float(cpu)


def _imported_packages(python: str, bundle: Path, module: str) -> list[str]:
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(bundle), "LAMBDA_TASK_ROOT": str(bundle),
           **LAMBDA_ENV}
    out = subprocess.run([python, "-X", "importtime", "-c", f"import {module}"], cwd=bundle, env=env,
                         capture_output=True, text=True, check=True)
    names = {line.rsplit("|", 1)[1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")}
    tops = {n.split(".")[0] for n in names if n and n != "imported package"}
    return sorted(t for t in tops if (bundle / t).exists() or (bundle / f"{t}.py").exists())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    config = load_cluster_config(ROOT / "clusters" / "demo.yaml")
    python = pyc_python()
    host = HOST_PLATFORMS[platform.machine()]
    with tempfile.TemporaryDirectory(prefix="bundle-") as tmp:
        shipped, local = Path(tmp) / "arm64", Path(tmp) / "host"
        build_asset(shipped, config, python=python, compile_pyc=python is not None)
        size, files = _size(shipped)
        if python is None:
            print(json.dumps({"bundleBytesUnzipped": size, "bundleMiBUnzipped": round(size / 2**20, 1),
                              "bundleFiles": files, "imports": "not measured: no Python 3.13 (set "
                                                               "AUTOSCALER_PYC_PYTHON)"}, indent=2))
            return 0
        build_asset(local, config, platforms=host, python=python)
        source_only = Path(tmp) / "host-no-pyc"
        shutil.copytree(local, source_only, ignore=shutil.ignore_patterns("__pycache__"))
        handlers: dict[str, Any] = {}
        for name, entry in HANDLERS.items():
            module = entry.rsplit(".", 1)[0]
            with_pyc = [_import_seconds(python, local, module, pyc=True) for _ in range(args.runs)]
            without = [_import_seconds(python, source_only, module, pyc=False) for _ in range(args.runs)]
            packages = _imported_packages(python, local, module)
            handlers[name] = {"importSecondsWithPyc": round(statistics.median(w for w, _ in with_pyc), 3),
                              "importSecondsWithoutPyc": round(statistics.median(w for w, _ in without), 3),
                              "importCpuSecondsWithPyc": round(statistics.median(c for _, c in with_pyc), 3),
                              "importCpuSecondsWithoutPyc": round(statistics.median(c for _, c in without), 3),
                              "importedPackages": packages,
                              "importsDroppedPath": [p for p in UNUSED_PATHS if p.split("/")[0] in packages
                                                     and any(m.startswith(p.replace("/", ".")) for m in packages)]}
        pyc_bytes = sum(p.stat().st_size for p in shipped.rglob("*.pyc"))
        print(json.dumps({
            "python": subprocess.run([python, "-V"], capture_output=True, text=True, check=True).stdout.strip(),
            "runs": args.runs,
            "bundleBytesUnzipped": size, "bundleMiBUnzipped": round(size / 2**20, 1), "bundleFiles": files,
            "pycMiB": round(pyc_bytes / 2**20, 1),
            "largestPackagesMiB": dict(sorted(((p.name, round(_size(p)[0] / 2**20, 1)) for p in shipped.iterdir()
                                               if p.is_dir() and not p.name.endswith(".dist-info")),
                                              key=lambda kv: -kv[1])[:8]),
            "handlers": handlers,
            "targetImportSeconds": 0.8,
            "meetsTarget": all(h["importSecondsWithPyc"] <= 0.8 for h in handlers.values()),
            "loadAverage1m": round(os.getloadavg()[0], 2), "cpus": os.cpu_count(),
        }, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
