"""A discrete-event simulation of an EKS cluster in virtual time, driving the real Lambda handlers
against moto and the Kubernetes API emulator (issue 16; docs/simulation.md). Never shipped to Lambda.

``engine`` (virtual clock and event heap), ``scheduler`` (a kube-scheduler oracle on raw Kubernetes
JSON), ``kubelet`` (node boot, registration, readiness, pod start and termination, node loss),
``controllers`` (Deployments, DaemonSets, Jobs), ``hpa`` (HorizontalPodAutoscalers on a load curve),
``cloud`` (what EC2 calls do to the simulated world, capacity errors, duplicate launches),
``nodegroups`` (managed node groups), ``interruption`` (spot interruptions and the interruption queue),
``baseline`` (a Cluster-Autoscaler-like policy), ``scenario`` (the YAML format), ``runner`` (wires them
with the handlers), ``facts`` and ``report`` (summary, assertions, text, JSON, plot).
"""
