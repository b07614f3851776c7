#!/usr/bin/env bash
# Builds the local control plane's binaries (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, helm, and the CRD checker) from Go modules into a cache
# outside the repo, keyed by the pinned versions. A second run builds nothing.
# Prints the bin directory on stdout's last line; progress goes to stderr.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
module="$here/controlplane"
kube_version="v1.37.2"
key="$(cat "$module/go.mod" "$module/go.sum" | sha256sum | cut -c1-12)"
cache="${SPECFLEET_CACHE:-$HOME/.cache/specfleet}/controlplane/$kube_version-$key"
bin="$cache/bin"
mkdir -p "$bin"

log() { printf '[build-controlplane] %s\n' "$*" >&2; }

# One build per cache at a time: two checkouts building at once would both write
# "$bin/NAME.tmp" and one would fail to move the other's file into place.
exec 9>"$cache/.lock"
if ! flock -n 9; then
    log "another build holds $cache/.lock; waiting for it"
    flock 9
fi

version_ldflags() {
    local pkg="$1" minor
    minor="${kube_version#v1.}"; minor="${minor%%.*}"
    printf -- '-s -w -X %s.gitVersion=%s -X %s.gitMajor=1 -X %s.gitMinor=%s -X %s.gitTreeState=clean -X %s.buildDate=%s' \
        "$pkg" "$kube_version" "$pkg" "$pkg" "$minor" "$pkg" "$pkg" "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
}

build() {  # build NAME PACKAGE LDFLAGS
    local name="$1" pkg="$2" ldflags="$3" started elapsed pid
    if [[ -x "$bin/$name" ]]; then
        log "$name: cached"
        return
    fi
    log "$name: building $pkg (a cold build takes minutes)"
    started=$SECONDS
    (cd "$module" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$bin/$name.tmp" "$pkg") &
    pid=$!
    # Poll each second (a build that ends is seen at once), say so every 30 s.
    while kill -0 "$pid" 2>/dev/null; do
        sleep 1
        if (((SECONDS - started) % 30 == 0)) && kill -0 "$pid" 2>/dev/null; then
            log "$name: still building, $((SECONDS - started))s"
        fi
    done
    wait "$pid"
    mv "$bin/$name.tmp" "$bin/$name"
    elapsed=$((SECONDS - started))
    log "$name: built in ${elapsed}s"
}

kube_ldflags="$(version_ldflags k8s.io/component-base/version)"
build etcd go.etcd.io/etcd/server/v3 "-s -w"
build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$kube_ldflags"
build kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager "$kube_ldflags"
build kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler "$kube_ldflags"
build helm helm.sh/helm/v4/cmd/helm "-s -w -X helm.sh/helm/v4/internal/version.version=v4.3.2"
# The CRD checker is this repo's own code: its name carries its source's hash, so an
# edit builds a new one instead of reusing a stale binary under the same key.
build "crdcheck-$(sha256sum "$module/crdcheck/main.go" | cut -c1-12)" \
    specfleet.io/e2e/controlplane/crdcheck "-s -w"
echo "$bin"
