"""Serverless node autoscaler for Amazon EKS: Karpenter-class provisioning run from AWS Lambda.

The package is layered: ``domain`` is pure logic, ``aws`` and ``kube`` are adapters, ``handlers``
are the Lambda entry points and ``cli`` the ``autoscaler`` console script.
"""

__version__ = "0.1.0"
