"""A discrete-event simulation of an EKS cluster in virtual time, driving the real Lambda handlers
against moto and the Kubernetes API emulator (issue 16). Never shipped to Lambda.

``engine`` (virtual clock and event heap), ``scheduler`` (a kube-scheduler oracle on raw Kubernetes
JSON), ``kubelet`` (node boot, registration, readiness, pod start and termination, node loss),
``controllers`` (Deployments, DaemonSets), ``cloud`` (what EC2 calls do to the simulated world),
``scenario`` (the YAML format), ``runner`` (wires them with the handlers) and ``report`` (summary, plot).
"""
