"""A real Kubernetes control plane on loopback for tests: etcd, kube-apiserver, kube-scheduler and
kube-controller-manager, built from upstream by ``tools/kube/build.sh`` (versions pinned in
``tools/kube/go.mod``).

One control plane per test process (each xdist worker that needs one), started on first
use and stopped by pid when the process exits. The API server authenticates with a static token file, one
identity per function (the groups the stack's EKS access entries give them, ``infra/identity.py``),
authorises with RBAC and runs its default admission plugins. Nothing here imports ``autoscaler``.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import urllib3

REPO = Path(__file__).resolve().parents[1]
BUILD_SCRIPT = REPO / "tools" / "kube" / "build.sh"
BINARIES = ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager")

# The controllers the product depends on (and those they need: service accounts for pods, DaemonSets and
# the PersistentVolume binder for the end-to-end scenarios, taint eviction for the node lifecycle; StatefulSets
# and Jobs for the benchmarks' pod calibration, tests/e2e/real_kube/test_realistic_pods_real.py).
CONTROLLERS = ("deployment-controller", "replicaset-controller", "statefulset-controller", "disruption-controller",
               "garbage-collector-controller", "node-lifecycle-controller", "namespace-controller",
               "serviceaccount-controller", "serviceaccount-token-controller", "daemonset-controller",
               "persistentvolume-binder-controller", "taint-eviction-controller", "job-controller")


@dataclass(frozen=True)
class Identity:
    user: str
    token: str
    groups: tuple[str, ...]


# Who calls the API server. The function identities carry the groups of infra/identity.py's access entries.
ADMIN = Identity("kube-admin", "admin-token", ("system:masters",))
IDENTITIES: dict[str, Identity] = {i.user: i for i in (
    ADMIN,
    Identity("system:kube-scheduler", "scheduler-token", ()),
    Identity("system:kube-controller-manager", "controller-manager-token", ()),
    Identity("provisioner", "provisioner-token", ("eks-serverless-autoscaler",)),
    Identity("disruption", "disruption-token", ("eks-serverless-autoscaler",)),
    Identity("interruption", "interruption-token", ("eks-serverless-autoscaler",)),
    Identity("watcher", "watcher-token", ("eks-serverless-autoscaler-watcher",)),
    Identity("nobody", "nobody-token", ()),
)}


class ControlPlaneError(RuntimeError):
    pass


def binaries_dir() -> Path:
    """The directory holding the four binaries, built by tools/kube/build.sh when missing (its progress goes
    to stderr; a cold build takes long, see docs/development.md). A failed build raises: never a skip."""
    proc = subprocess.run(["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, text=True, check=False)
    if proc.returncode != 0:
        raise ControlPlaneError(f"tools/kube/build.sh failed with exit code {proc.returncode}; run it by hand "
                                "to see why (it needs Go and the Go module proxy)")
    path = Path(proc.stdout.strip().splitlines()[-1])
    missing = [b for b in BINARIES if not (path / b).is_file()]
    if missing:
        raise ControlPlaneError(f"tools/kube/build.sh did not produce {missing} in {path}")
    return path


def _free_ports(n: int) -> list[int]:
    """``n`` distinct free ports (held open together while picked, so no two are the same)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def _kubeconfig(path: Path, server: str, token: str) -> Path:
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    }))
    return path


@dataclass
class ControlPlane:
    """A running control plane: ``url``, ``etcd_url``, ``request()`` as any identity, ``stop()``."""

    bin_dir: Path
    root: Path
    url: str = ""
    etcd_url: str = ""
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    # Kept-alive connections to the API server, shared by the threads of the test (a pool is thread-safe).
    # A connection per request cost a TLS handshake on both sides and a fresh SSL context (the system's CA
    # store read again): most of the CPU of a test that polls the control plane for a condition.
    _pool: urllib3.PoolManager = field(init=False, repr=False, default_factory=lambda: urllib3.PoolManager(
        cert_reqs=ssl.CERT_NONE, assert_hostname=False, maxsize=8,
        # A kept-alive connection the server closed is opened again; a request is never sent twice.
        retries=urllib3.Retry(total=2, connect=2, read=0, status=0, redirect=0, other=0)))

    # ----- lifecycle ----------------------------------------------------------------------------
    def start(self, timeout: float = 120.0) -> ControlPlane:
        etcd_port, peer_port, api_port = _free_ports(3)
        self.etcd_url = f"http://127.0.0.1:{etcd_port}"
        self.url = f"https://127.0.0.1:{api_port}"
        certs = self.root / "certs"
        certs.mkdir(parents=True)
        sa_key = certs / "sa.key"
        subprocess.run(["openssl", "genrsa", "-out", str(sa_key), "2048"], check=True, capture_output=True)
        subprocess.run(["openssl", "rsa", "-in", str(sa_key), "-pubout", "-out", str(certs / "sa.pub")],
                       check=True, capture_output=True)
        tokens = self.root / "tokens.csv"
        tokens.write_text("".join(f'{i.token},{i.user},{i.user},"{",".join(i.groups)}"\n'
                                  for i in IDENTITIES.values()))
        self._spawn("etcd", [
            "--name", "test", "--data-dir", str(self.root / "etcd"),
            "--listen-client-urls", self.etcd_url, "--advertise-client-urls", self.etcd_url,
            "--listen-peer-urls", f"http://127.0.0.1:{peer_port}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
            "--initial-cluster", f"test=http://127.0.0.1:{peer_port}",
            "--unsafe-no-fsync", "--log-level", "warn",
        ])
        self._wait(self._etcd_healthy, timeout, "etcd")
        self._spawn("kube-apiserver", [
            "--etcd-servers", self.etcd_url, "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
            # Loopback cannot be advertised through the kubernetes Service's endpoints; nothing here needs them.
            "--endpoint-reconciler-type=none",
            "--secure-port", str(api_port), "--cert-dir", str(certs),
            "--token-auth-file", str(tokens), "--authorization-mode", "RBAC",
            "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
            "--service-account-key-file", str(certs / "sa.pub"),
            "--service-account-signing-key-file", str(sa_key),
            "--service-cluster-ip-range", "10.96.0.0/24", "--allow-privileged=true",
            # Compaction only when a test asks for it (etcd's API), so a watch's 410 is deterministic.
            "--etcd-compaction-interval=0",
            "--profiling=false", "-v=0",
        ])
        self._wait(self._ready, timeout, "kube-apiserver /readyz")
        kcm = self.root / "kcm.kubeconfig"
        _kubeconfig(kcm, self.url, IDENTITIES["system:kube-controller-manager"].token)
        self._spawn("kube-controller-manager", [
            "--kubeconfig", str(kcm), "--bind-address", "127.0.0.1", "--secure-port", "0",
            "--leader-elect=false", "--use-service-account-credentials=true",
            "--controllers", ",".join(CONTROLLERS),
            "--service-account-private-key-file", str(sa_key),
            "--root-ca-file", str(certs / "apiserver.crt"),
            # Nodes the tests register post their own heartbeats; a test's node that stops is noticed soon.
            "--node-monitor-period=2s", "--node-monitor-grace-period=40s",
            "--concurrent-gc-syncs=5", "--profiling=false",
        ])
        sched = self.root / "scheduler.kubeconfig"
        _kubeconfig(sched, self.url, IDENTITIES["system:kube-scheduler"].token)
        self._spawn("kube-scheduler", [
            "--kubeconfig", str(sched), "--bind-address", "127.0.0.1", "--secure-port", "0",
            "--leader-elect=false", "--profiling=false",
        ])
        # Pods can be created once the namespace's default ServiceAccount exists (the ServiceAccount
        # admission plugin refuses them before): the controller manager is working then.
        self._wait(lambda: self._exists("/api/v1/namespaces/default/serviceaccounts/default"), timeout,
                   "kube-controller-manager (the default ServiceAccount)")
        return self

    def stop(self) -> None:
        """Stop the processes this control plane started, by pid, newest first (etcd last: the API server's
        shutdown waits on it), each given 10 s before it is killed; then remove its data."""
        for name in reversed(list(self.procs)):
            proc = self.procs[name]
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        self.procs.clear()
        shutil.rmtree(self.root, ignore_errors=True)

    def _spawn(self, name: str, args: list[str]) -> None:
        log = (self.root / f"{name}.log").open("wb")
        self.procs[name] = subprocess.Popen([str(self.bin_dir / name), *args], stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, cwd=self.root)

    def _wait(self, ready: Any, timeout: float, what: str) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise ControlPlaneError(f"{name} exited with {proc.returncode} while waiting for {what}:\n"
                                            + self.log_tail(name))
            with contextlib.suppress(OSError, urllib3.exceptions.HTTPError, ControlPlaneError):
                if ready():
                    return
            time.sleep(0.1)
        raise ControlPlaneError(f"{what} not ready within {timeout:g} s:\n"
                                + "\n".join(self.log_tail(n) for n in self.procs))

    def log_tail(self, name: str, lines: int = 30) -> str:
        path = self.root / f"{name}.log"
        text = path.read_text(errors="replace").splitlines()[-lines:] if path.exists() else []
        return f"--- {name} ---\n" + "\n".join(text)

    def _etcd_healthy(self) -> bool:
        with urllib.request.urlopen(f"{self.etcd_url}/health", timeout=2) as resp:
            return bool(json.loads(resp.read()).get("health") == "true")

    def _ready(self) -> bool:
        status, _ = self.request("GET", "/readyz")
        return status == 200

    def _exists(self, path: str) -> bool:
        status, _ = self.request("GET", path)
        return status == 200

    # ----- requests ------------------------------------------------------------------------------
    def request(self, method: str, path: str, body: Any = None, *, identity: Identity = ADMIN,
                content_type: str = "application/json", timeout: float = 30.0) -> tuple[int, Any]:
        """One request as ``identity``: (HTTP status, parsed JSON body or text)."""
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Authorization": f"Bearer {identity.token}", "Accept": "application/json",
                   **({"Content-Type": content_type} if data is not None else {})}
        resp = self._pool.request(method, self.url + path, body=data, headers=headers, timeout=timeout,
                                  redirect=False)
        status, raw = resp.status, resp.data
        try:
            return status, json.loads(raw) if raw else None
        except ValueError:
            return status, raw.decode(errors="replace")

    def must(self, method: str, path: str, body: Any = None, **kwargs: Any) -> Any:
        status, out = self.request(method, path, body, **kwargs)
        if not 200 <= status < 300:
            raise ControlPlaneError(f"{method} {path}: HTTP {status}: {out}")
        return out

    def apply_manifest(self, docs: list[dict[str, Any]]) -> None:
        """Create (or replace) cluster-scoped RBAC objects and the like, as ``kubectl apply`` would."""
        for doc in docs:
            group_version = doc["apiVersion"]
            base = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
            plural = {"ClusterRole": "clusterroles", "ClusterRoleBinding": "clusterrolebindings"}[doc["kind"]]
            name = doc["metadata"]["name"]
            status, current = self.request("GET", f"{base}/{plural}/{name}")
            if status == 200:
                self.must("PUT", f"{base}/{plural}/{name}", {**doc, "metadata": {
                    **doc["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]}})
            else:
                self.must("POST", f"{base}/{plural}", doc)

    def compact_etcd(self) -> int:
        """Compact etcd at its current revision (what the API server does every 5 minutes by default): older
        resourceVersions are gone. Returns the revision compacted at."""
        def post(path: str, body: dict[str, Any]) -> Any:
            req = urllib.request.Request(self.etcd_url + path, data=json.dumps(body).encode(), method="POST")
            with urllib.request.urlopen(req, timeout=10) as resp:
                return json.loads(resp.read())
        rev = int(post("/v3/kv/range", {"key": "AA=="})["header"]["revision"])
        post("/v3/kv/compaction", {"revision": str(rev), "physical": True})
        return rev


_RUNNING: ControlPlane | None = None


def shutdown() -> None:
    """Stop this process's control plane, if it started one (the test session's end)."""
    global _RUNNING  # noqa: PLW0603
    if _RUNNING is not None:
        _RUNNING.stop()
        _RUNNING = None


def control_plane() -> ControlPlane:
    """This process's control plane, started on first use and stopped at exit."""
    global _RUNNING  # noqa: PLW0603 - one control plane per test process, as a session fixture's value
    if _RUNNING is None:
        root = Path(tempfile.mkdtemp(prefix="real-kube-"))
        plane = ControlPlane(binaries_dir(), root)
        try:
            plane.start()
        except BaseException:
            plane.stop()
            raise
        atexit.register(plane.stop)
        _RUNNING = plane
    return _RUNNING


def _main() -> int:
    """``python -m tests.real_kube``: start a control plane and print how to reach it, until Ctrl-C."""
    plane = control_plane()
    print(json.dumps({"url": plane.url, "token": ADMIN.token, "logs": str(plane.root), "pid": os.getpid()}),
          flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        signal.pause()
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
