"""Persistent volumes in virtual time: dynamic provisioning with ``WaitForFirstConsumer`` binding, and the
attach/detach controller, as the EBS CSI driver and Kubernetes do them for zonal volumes.

- Provisioning: a claim with no volume is provisioned once a pod that uses it is bound to a node (the
  StorageClass's ``volumeBindingMode: WaitForFirstConsumer``, the EBS CSI default): ``provision_seconds``
  later a PersistentVolume exists in that node's zone (label ``topology.kubernetes.io/zone`` and a required
  node affinity on it) and the claim is Bound to it. From then on the volume, and any pod using the claim,
  stays in that zone: the pod's first zone.
- Attach: a pod's containers start only once each of its volumes is attached to its node. A volume
  attaches ``attach_seconds`` after the kubelet asks, and only when no other node holds it (EBS volumes are
  ReadWriteOnce: a pod whose volume is still attached elsewhere waits, kubelet's "Multi-Attach error").
- Detach: when the pod using a volume is gone from the API, the volume detaches from the old node
  ``detach_seconds`` later if that node's kubelet unmounted it (the pod was deleted while its node was
  Ready). A node gone uncleanly (its instance terminated, its kubelet stopped: the Node is NotReady,
  Unknown or deleted when the pod goes) never confirms the unmount, so the attach/detach controller waits
  ``maxWaitForUnmountDuration`` (6 minutes in kube-controller-manager) from the pod's deletion and then
  force-detaches; until then the replacement pod, bound in the volume's zone, cannot start (the kubelet's
  "Multi-Attach error"). A Node tainted ``node.kubernetes.io/out-of-service`` (non-graceful node shutdown)
  is force-detached at once, after the ordinary ``detach_seconds``.

The default delays are typical of EBS (a gp3 volume created in seconds, attached in about ten); scenarios
set them under ``settings``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from simulator.kube_store import Store, WatchEvent
from simulator.sim.engine import EventLoop

ZONE_LABEL = "topology.kubernetes.io/zone"
OUT_OF_SERVICE_TAINT = "node.kubernetes.io/out-of-service"
MAX_WAIT_FOR_UNMOUNT_SECONDS = 360.0  # kube-controller-manager's attach/detach reconciler (maxWaitForUnmountDuration)


@dataclass
class VolumeSettings:
    provision_seconds: float = 5.0
    attach_seconds: float = 10.0
    detach_seconds: float = 10.0
    force_detach_seconds: float = MAX_WAIT_FOR_UNMOUNT_SECONDS


@dataclass
class Volumes:
    loop: EventLoop
    store: Store
    settings: VolumeSettings = field(default_factory=VolumeSettings)
    log: Callable[[str, str], None] | None = None
    attached: dict[str, tuple[str, float]] = field(default_factory=dict)  # volume -> (node, attached from)
    attaches: int = 0
    detaches: int = 0
    force_detaches: int = 0
    _provisioning: set[tuple[str, str]] = field(default_factory=set)
    _serial: int = 0

    def _claims(self, pod: dict[str, Any]) -> list[tuple[str, str]]:
        ns = pod["metadata"].get("namespace", "default")
        return [(ns, claim) for v in (pod.get("spec") or {}).get("volumes") or ()
                if (claim := (v.get("persistentVolumeClaim") or {}).get("claimName"))]

    def observe(self, event: WatchEvent) -> None:
        if event.plural != "pods":
            return
        pod = event.obj
        node = (pod.get("spec") or {}).get("nodeName")
        if not node:
            return
        if event.type == "DELETED":
            unmounted = self._kubelet_unmounts(node)
            for key in self._claims(pod):
                self._detach_later(key, node, unmounted=unmounted)
            return
        for key in self._claims(pod):
            claim = self.store.peek("persistentvolumeclaims", *key)
            if claim is not None and not (claim.get("spec") or {}).get("volumeName") and key not in self._provisioning:
                self._provisioning.add(key)
                self.loop.after(self.settings.provision_seconds, f"provision volume for {key[0]}/{key[1]}",
                                lambda key=key, node=node: self._provision(key, node))  # type: ignore[misc]

    def _provision(self, key: tuple[str, str], node_name: str) -> None:
        self._provisioning.discard(key)
        claim = self.store.peek("persistentvolumeclaims", *key)
        node = self.store.peek("nodes", None, node_name)
        if claim is None or (claim.get("spec") or {}).get("volumeName") or node is None:
            return
        zone = (node["metadata"].get("labels") or {}).get(ZONE_LABEL, "")
        self._serial += 1
        name = f"pvc-{key[0]}-{key[1]}-{self._serial}"
        size = (((claim.get("spec") or {}).get("resources") or {}).get("requests") or {}).get("storage", "1Gi")
        self.store.create("persistentvolumes", {
            "apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": name, "labels": {ZONE_LABEL: zone}},
            "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"],
                     "claimRef": {"namespace": key[0], "name": key[1]},
                     "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": f"vol-{self._serial:017x}"},
                     "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                         {"key": ZONE_LABEL, "operator": "In", "values": [zone]}]}]}}},
            "status": {"phase": "Bound"}})
        self.store.patch("persistentvolumeclaims", key[0], key[1],
                         {"spec": {"volumeName": name}, "status": {"phase": "Bound"}})
        if self.log:
            self.log("volume", f"provisioned {name} in {zone} for {key[0]}/{key[1]} (first pod on {node_name})")

    def _kubelet_unmounts(self, node_name: str) -> bool:
        """Whether the node's kubelet confirms the unmount of a deleted pod's volumes (it reports them gone
        from the Node's ``volumesInUse``): only a Ready node's does; an out-of-service taint stands in for it."""
        node = self.store.peek("nodes", None, node_name)
        if node is None:
            return False
        if any(t.get("key") == OUT_OF_SERVICE_TAINT for t in (node.get("spec") or {}).get("taints") or ()):
            return True
        return any(c.get("type") == "Ready" and c.get("status") == "True"
                   for c in (node.get("status") or {}).get("conditions") or ())

    def _detach_later(self, key: tuple[str, str], node: str, *, unmounted: bool) -> None:
        claim = self.store.peek("persistentvolumeclaims", *key)
        volume = ((claim or {}).get("spec") or {}).get("volumeName")
        if not volume or self.attached.get(volume, ("", 0.0))[0] != node:
            return
        delay = self.settings.detach_seconds if unmounted else self.settings.force_detach_seconds
        if not unmounted and self.log:
            self.log("volume", f"{volume} still attached to {node}: the node went without unmounting it, "
                               f"force-detach in {delay:g} s (maxWaitForUnmountDuration)")

        def detach() -> None:
            if self.attached.get(volume, ("", 0.0))[0] == node and not self._used_on(volume, node):
                del self.attached[volume]
                self.detaches += 1
                if not unmounted:
                    self.force_detaches += 1
                if self.log:
                    how = "force-detached" if not unmounted else "detached"
                    self.log("volume", f"{volume} {how} from {node}")

        self.loop.after(delay, f"detach {volume}", detach)

    def _used_on(self, volume: str, node: str) -> bool:
        for pod in self.store.view("pods"):
            if (pod.get("spec") or {}).get("nodeName") != node:
                continue
            for key in self._claims(pod):
                claim = self.store.peek("persistentvolumeclaims", *key)
                if ((claim or {}).get("spec") or {}).get("volumeName") == volume:
                    return True
        return False

    def ready_in(self, pod: dict[str, Any], node: str) -> float | None:
        """Seconds until every volume of ``pod`` is attached to ``node`` (0: now); None while one cannot be
        attached yet (not provisioned, or still attached to another node). Asking starts the attach."""
        wait = 0.0
        now = self.loop.now
        for key in self._claims(pod):
            claim = self.store.peek("persistentvolumeclaims", *key)
            if claim is None:
                return None
            volume = (claim.get("spec") or {}).get("volumeName")
            if not volume:
                return None
            holder = self.attached.get(volume)
            if holder is None:
                self.attached[volume] = (node, now + self.settings.attach_seconds)
                self.attaches += 1
                if self.log:
                    self.log("volume", f"attaching {volume} to {node}")
                wait = max(wait, self.settings.attach_seconds)
            elif holder[0] != node:
                return None
            else:
                wait = max(wait, holder[1] - now)
        return wait
