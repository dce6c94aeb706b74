"""Kubernetes adapters: EKS authentication and the cluster adapter (official client, raw JSON lists)."""
