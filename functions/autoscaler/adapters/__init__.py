"""Adapters: translate AWS (``aws/``) and Kubernetes (``kube/``) into the application's ports, and their
errors into the ports' typed errors."""
