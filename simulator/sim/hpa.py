"""HorizontalPodAutoscalers on CPU utilisation, driven by a load curve, in virtual time.

The load is the CPU (in cores) a Deployment's clients make it burn, set by the scenario's timeline
(``load`` steps: an ``ab`` burst, then quiet), shared evenly by its Ready pods. Every ``sync_seconds``
(the controller's 15 s) the HPA computes the replicas that bring average utilisation to its target
(``ceil(load / (request x target))``, no change within the 10 % tolerance), bounded by min/max, by the
default scale-up policy (at most double or +4 pods per 15 s, whichever is more) and, for scale-down, by
the default 300 s stabilisation window (the highest recommendation of the last five minutes)
(https://kubernetes.io/docs/tasks/run-application/horizontal-pod-autoscale/#algorithm-details).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from simulator.sim.controllers import Controllers
from simulator.sim.engine import EventLoop
from simulator.sim.pod_resources import pod_requests

TOLERANCE = 0.1
SCALE_DOWN_WINDOW = 300.0


@dataclass
class Hpa:
    deployment: str
    namespace: str = "default"
    min_replicas: int = 1
    max_replicas: int = 10
    target_cpu_utilization: int = 50  # percent of the pods' CPU request
    recommendations: list[tuple[float, int]] = field(default_factory=list)


@dataclass
class Autoscalers:
    loop: EventLoop
    controllers: Controllers
    sync_seconds: float = 15.0
    hpas: list[Hpa] = field(default_factory=list)
    load: dict[tuple[str, str], float] = field(default_factory=dict)  # (namespace, deployment) -> cores
    log: Callable[[str, str], None] | None = None
    _started: bool = False

    def add(self, hpa: Hpa) -> None:
        self.hpas.append(hpa)
        if not self._started:
            self._started = True
            self.loop.every(self.sync_seconds, "HPA sync", self.sync, start=self.loop.now + self.sync_seconds)

    def set_load(self, namespace: str, deployment: str, cores: float) -> None:
        self.load[(namespace, deployment)] = cores

    def utilization(self, hpa: Hpa) -> float | None:
        """Average CPU utilisation of the Deployment's Ready pods, in percent of their request."""
        dep = self.controllers.deployments.get((hpa.namespace, hpa.deployment))
        if dep is None:
            return None
        request = float(pod_requests(dep.template).get("cpu", 0))
        ready = self.controllers.ready_pods(dep)
        if request <= 0 or ready == 0:
            return None
        return 100.0 * self.load.get((hpa.namespace, hpa.deployment), 0.0) / (ready * request)

    def sync(self) -> None:
        for hpa in self.hpas:
            dep = self.controllers.deployments.get((hpa.namespace, hpa.deployment))
            if dep is None:
                continue
            current = dep.replicas
            used = self.utilization(hpa)
            desired = current
            if used is not None and abs(used / hpa.target_cpu_utilization - 1.0) > TOLERANCE:
                request = float(pod_requests(dep.template).get("cpu", 0))
                cores = self.load.get((hpa.namespace, hpa.deployment), 0.0)
                desired = math.ceil(cores / (request * hpa.target_cpu_utilization / 100.0))
            desired = max(hpa.min_replicas, min(hpa.max_replicas, desired))
            now = self.loop.now
            hpa.recommendations = [(t, r) for t, r in hpa.recommendations if now - t < SCALE_DOWN_WINDOW]
            hpa.recommendations.append((now, desired))
            if desired > current:
                desired = min(desired, max(2 * current, current + 4))
            elif desired < current:
                desired = max(r for _, r in hpa.recommendations)
            if desired != current:
                if self.log is not None:
                    shown = "unknown" if used is None else f"{used:.0f}%"
                    self.log("hpa", f"{hpa.deployment}: cpu {shown} of target {hpa.target_cpu_utilization}%, "
                                    f"replicas {current} -> {desired}")
                self.controllers.scale(hpa.namespace, hpa.deployment, desired)
