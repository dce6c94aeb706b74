#!/usr/bin/env bash
# Builds etcd, kube-apiserver, kube-scheduler and kube-controller-manager from the
# module proxy (versions pinned in go.mod beside this script) into a cache outside
# the work tree, keyed by version, and reuses it when all four are present.
#
#   tools/kube/build.sh          build when missing, print the directory
#   tools/kube/build.sh --dir    print the directory only (no build)
#
# The tests find the binaries through the same directory (tests/real_kube.py
# reads KUBE_VERSION from this file), or through EKS_AUTOSCALER_KUBE_BIN.
set -euo pipefail

KUBE_VERSION=v1.37.2
ETCD_VERSION=v3.7.0
BINARIES=(etcd kube-apiserver kube-scheduler kube-controller-manager)

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache_root="${XDG_CACHE_HOME:-$HOME/.cache}/eks-autoscaler"
dest="${EKS_AUTOSCALER_KUBE_BIN:-$cache_root/kube-$KUBE_VERSION-etcd-$ETCD_VERSION}"

if [[ "${1:-}" == "--dir" ]]; then
    echo "$dest"
    exit 0
fi

complete() {
    for b in "${BINARIES[@]}"; do [[ -x "$dest/$b" ]] || return 1; done
}

if complete; then
    echo "kube binaries: reusing $dest" >&2
    echo "$dest"
    exit 0
fi

mkdir -p "$cache_root"
# One builder at a time (pytest-xdist workers, make and a developer may race).
exec 9>"$cache_root/.build.lock"
flock 9
if complete; then
    echo "$dest"
    exit 0
fi

tmp="$dest.partial"
rm -rf "$tmp"
mkdir -p "$tmp"
cd "$here"
start=$(date +%s)
declare -A pkg=(
    [etcd]=go.etcd.io/etcd/server/v3
    [kube-apiserver]=k8s.io/kubernetes/cmd/kube-apiserver
    [kube-scheduler]=k8s.io/kubernetes/cmd/kube-scheduler
    [kube-controller-manager]=k8s.io/kubernetes/cmd/kube-controller-manager
)
n=0
for b in "${BINARIES[@]}"; do
    n=$((n + 1))
    echo "kube binaries: [$n/${#BINARIES[@]}] building $b (${pkg[$b]}) into $dest; a cold build takes tens of minutes on 2 cores" >&2
    # -trimpath and -s -w: smaller binaries, and the cache does not depend on paths.
    # nice: the machine running this is usually busy with tests too.
    nice -n 10 go build -buildvcs=false -trimpath -ldflags="-s -w" -o "$tmp/$b" "${pkg[$b]}"
    echo "kube binaries: [$n/${#BINARIES[@]}] $b done after $(( $(date +%s) - start )) s" >&2
done
"$tmp/etcd" --version | head -1 >&2
"$tmp/kube-apiserver" --version >&2
rm -rf "$dest"
mv "$tmp" "$dest"
echo "kube binaries: built in $(( $(date +%s) - start )) s, $(du -sh "$dest" | cut -f1) in $dest" >&2
echo "$dest"
