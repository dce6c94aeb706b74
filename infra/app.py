"""CDK entry point: ``cdk synth -c cluster=NAME`` builds the stack for one cluster."""

from __future__ import annotations

import sys
from pathlib import Path

import aws_cdk as cdk

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from infra.stack import AutoscalerStack


def build_app(app: cdk.App | None = None) -> cdk.App:
    app = app or cdk.App()
    cluster = str(app.node.try_get_context("cluster") or "demo")
    AutoscalerStack(app, f"eks-autoscaler-{cluster}", cluster_name=cluster)
    return app


if __name__ == "__main__":
    build_app().synth()
