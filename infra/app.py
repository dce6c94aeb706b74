"""CDK entry point: ``cdk synth -c cluster=NAME`` builds the stack for the cluster in ``clusters/NAME.yaml``.

Context: ``cluster`` (default ``demo``), ``configFile`` (a path instead of ``clusters/NAME.yaml``),
``skipBundling`` (``true``: do not pip-install the Lambda dependencies; for tests and ``make synth``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

ROOT = Path(__file__).resolve().parent.parent
# `cdk synth` runs this file as a script: make the project and the Lambda package importable first.
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "functions"))

from autoscaler.config import ClusterConfig, ConfigError, load_cluster_config  # noqa: E402
from infra.stack import AutoscalerStack  # noqa: E402

CLUSTERS = ROOT / "clusters"


def _truthy(value: object) -> bool:
    return str(value).lower() in {"1", "true", "yes"}


def cluster_file(cluster: str) -> Path:
    """``clusters/<cluster>.yaml`` (or ``.yml``/``.json``); a ConfigError listing the known clusters if none."""
    for suffix in (".yaml", ".yml", ".json"):
        path = CLUSTERS / f"{cluster}{suffix}"
        if path.exists():
            return path
    known = sorted(p.stem for p in CLUSTERS.glob("*.y*ml")) + sorted(p.stem for p in CLUSTERS.glob("*.json"))
    raise ConfigError(source=f"clusters/{cluster}.yaml",
                      problems=[f"no such cluster file; known clusters: {', '.join(known) or 'none'}"])


def stack_name(config: ClusterConfig) -> str:
    return f"eks-autoscaler-{config.cluster_name}"


def build_app(app: cdk.App | None = None) -> cdk.App:
    app = app or cdk.App()
    cluster = str(app.node.try_get_context("cluster") or "demo")
    config_file = app.node.try_get_context("configFile")
    path = Path(config_file) if config_file else cluster_file(cluster)
    shown = path.resolve().relative_to(ROOT) if path.resolve().is_relative_to(ROOT) else path
    config = load_cluster_config(path, source=str(shown))
    env = cdk.Environment(account=config.account or None, region=config.region)
    AutoscalerStack(app, stack_name(config), config=config, env=env,
                    skip_bundling=_truthy(app.node.try_get_context("skipBundling")),
                    description=f"Serverless node autoscaler for EKS cluster {config.cluster_name}")
    # Findings are synth errors: every accepted one is suppressed with its reason in infra/nag.py.
    cdk.Aspects.of(app).add(AwsSolutionsChecks())
    return app


def main() -> int:
    try:
        app = build_app()
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    app.synth()
    return 0


if __name__ == "__main__":
    sys.exit(main())
