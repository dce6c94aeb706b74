"""Bundle size and cold-start imports: builds the Lambda asset exactly as ``make package`` does
(``infra/bundling.build_asset``: locked, pruned, bytecode compiled by a Python of the runtime's version) and
measures it.

Reported: the arm64 asset's unzipped size (what ships); then, for the same asset built with this
machine's wheels (arm64 native libraries cannot load here), each handler's import time in a fresh
process of that Python with and without the bytecode (median of ``--runs``), under Lambda's environment
variables (the X-Ray recorder, for one, behaves differently inside Lambda), and which top-level
packages each handler imports (``-X importtime``), checked against what the asset dropped. Each
function's cold start at its deployed memory size is estimated as its import CPU time divided by the
vCPU share Lambda gives that size (memory / 1,769 MB, at most one for a single thread), and the watcher's
is compared with the overlap between its runs.
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
from autoscaler.watcher_settings import OVERLAP_SECONDS  # noqa: E402
from infra.bundling import PLATFORMS, PYTHON_VERSION, UNUSED_PATHS, build_asset, pyc_python  # noqa: E402
from infra.functions import HANDLERS, INTERRUPTION_MEMORY_MB, WATCHER_MEMORY_MB  # noqa: E402

HOST_PLATFORMS = {"x86_64": ("manylinux2014_x86_64", "manylinux_2_28_x86_64"),
                  "aarch64": PLATFORMS}
LAMBDA_ENV = {"AWS_LAMBDA_FUNCTION_NAME": "bench", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "1024",
              "AWS_REGION": "eu-west-1", "AWS_DEFAULT_REGION": "eu-west-1",
              "AWS_EXECUTION_ENV": f"AWS_Lambda_python{PYTHON_VERSION}",
              "POWERTOOLS_SERVICE_NAME": "bench", "POWERTOOLS_METRICS_NAMESPACE": "bench"}
# The measured statement runs in the child: the interpreter's own start-up is not an import of ours.
# CPU time beside wall time: on a shared, loaded machine the wall time mostly measures the neighbours.
# Lambda allocates CPU in proportion to memory: one full vCPU at 1,769 MB.
MB_PER_VCPU = 1769
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
    memory = {"provisioner": config.provisioner.memory_mb, "disruption": config.disruption.memory_mb,
              "interruption": INTERRUPTION_MEMORY_MB, "watcher": WATCHER_MEMORY_MB}
    python = pyc_python()
    host = HOST_PLATFORMS[platform.machine()]
    with tempfile.TemporaryDirectory(prefix="bundle-") as tmp:
        shipped, local = Path(tmp) / "arm64", Path(tmp) / "host"
        build_asset(shipped, config, python=python)
        size, files = _size(shipped)
        build_asset(local, config, platforms=host, python=python)
        source_only = Path(tmp) / "host-no-pyc"
        shutil.copytree(local, source_only, ignore=shutil.ignore_patterns("__pycache__"))
        handlers: dict[str, Any] = {}
        for name, entry in HANDLERS.items():
            module = entry.rsplit(".", 1)[0]
            with_pyc = [_import_seconds(python, local, module, pyc=True) for _ in range(args.runs)]
            without = [_import_seconds(python, source_only, module, pyc=False) for _ in range(args.runs)]
            packages = _imported_packages(python, local, module)
            cpu = statistics.median(c for _, c in with_pyc)
            share = min(1.0, memory[name] / MB_PER_VCPU)
            handlers[name] = {"memoryMb": memory[name], "vcpuShare": round(share, 3),
                              "coldStartImportSecondsAtMemory": round(cpu / share, 2),
                              "importSecondsWithPyc": round(statistics.median(w for w, _ in with_pyc), 3),
                              "importSecondsWithoutPyc": round(statistics.median(w for w, _ in without), 3),
                              "importCpuSecondsWithPyc": round(statistics.median(c for _, c in with_pyc), 3),
                              "importCpuSecondsWithoutPyc": round(statistics.median(c for _, c in without), 3),
                              "importedPackages": packages,
                              "importsDroppedPath": [p for p in UNUSED_PATHS if p.split("/")[0] in packages
                                                     and any(m.startswith(p.replace("/", ".")) for m in packages)]}
        pyc_bytes = sum(p.stat().st_size for p in shipped.rglob("*.pyc"))
        sources = list(shipped.rglob("*.py"))
        tag = f"cpython-{PYTHON_VERSION.replace('.', '')}"
        compiled = sum(1 for p in sources if (p.parent / "__pycache__" / f"{p.stem}.{tag}.pyc").is_file())
        watcher_cold = handlers["watcher"]["coldStartImportSecondsAtMemory"]
        print(json.dumps({
            "python": subprocess.run([python, "-V"], capture_output=True, text=True, check=True).stdout.strip(),
            "runs": args.runs,
            "bundleBytesUnzipped": size, "bundleMiBUnzipped": round(size / 2**20, 1), "bundleFiles": files,
            "pycMiB": round(pyc_bytes / 2**20, 1), "modules": len(sources), "modulesWithPyc": compiled,
            "largestPackagesMiB": dict(sorted(((p.name, round(_size(p)[0] / 2**20, 1)) for p in shipped.iterdir()
                                               if p.is_dir() and not p.name.endswith(".dist-info")),
                                              key=lambda kv: -kv[1])[:8]),
            "handlers": handlers,
            "targetImportSeconds": 0.8,
            "meetsTarget": all(h["importSecondsWithPyc"] <= 0.8 for h in handlers.values()),
            "watcherOverlapSeconds": OVERLAP_SECONDS,
            "watcherOverlapCoversColdStart": 2 * watcher_cold <= OVERLAP_SECONDS,
            "assumptions": "cold start = import CPU seconds on this machine / (memory / 1769 MB); this machine's "
                           "cores are not Graviton's, and the EKS token and first list come on top",
            "loadAverage1m": round(os.getloadavg()[0], 2), "cpus": os.cpu_count(),
        }, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
