"""The boto3 session a Lambda container makes its clients from, and the one EKS read a handler needs at a
cold start (the cluster's endpoint, CA and version): handlers import no AWS SDK themselves."""

from __future__ import annotations

from typing import Any

import boto3


def aws_session(region: str) -> Any:
    """A boto3 Session for ``region`` (credentials and ``AWS_ENDPOINT_URL`` from the environment)."""
    return boto3.Session(region_name=region)


def describe_eks_cluster(session: Any, *, name: str, region: str) -> dict[str, Any]:
    """eks:DescribeCluster's ``cluster`` object."""
    described: dict[str, Any] = session.client("eks", region_name=region).describe_cluster(name=name)["cluster"]
    return described
