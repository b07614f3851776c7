#!/usr/bin/env bash
# Builds the local control plane's binaries (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, helm, the CRD and pod checkers) from Go modules
# into a cache outside the repo, keyed by the pinned versions. A second run builds nothing.
# Prints the bin directory on stdout's last line; progress goes to stderr.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=e2e/go-build.sh
source "$here/go-build.sh"
kube_version="v1.37.2"
go_build_cache controlplane "$here/controlplane" "$kube_version"

version_ldflags() {
    local pkg="$1" minor
    minor="${kube_version#v1.}"; minor="${minor%%.*}"
    printf -- '-s -w -X %s.gitVersion=%s -X %s.gitMajor=1 -X %s.gitMinor=%s -X %s.gitTreeState=clean -X %s.buildDate=%s' \
        "$pkg" "$kube_version" "$pkg" "$pkg" "$minor" "$pkg" "$pkg" "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
}

kube_ldflags="$(version_ldflags k8s.io/component-base/version)"
go_build etcd go.etcd.io/etcd/server/v3 "-s -w"
go_build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$kube_ldflags"
go_build kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager "$kube_ldflags"
go_build kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler "$kube_ldflags"
go_build helm helm.sh/helm/v4/cmd/helm "-s -w -X helm.sh/helm/v4/internal/version.version=v4.3.2"
# The CRD checker is this repo's own code: its name carries its source's hash, so an
# edit builds a new one instead of reusing a stale binary under the same key.
go_build "crdcheck-$(sha256sum "$module/crdcheck/main.go" | cut -c1-12)" \
    specfleet.io/e2e/controlplane/crdcheck "-s -w"
go_build "podcheck-$(sha256sum "$module/podcheck/main.go" | cut -c1-12)" \
    specfleet.io/e2e/controlplane/podcheck "-s -w"
echo "$bin"
