#!/usr/bin/env bash
# Builds prometheus-operator and its config reloader (e2e/monitoring) and Prometheus
# v3.5.0 with its Kubernetes service discovery only (e2e/prometheus-server: module
# v0.305.0, the version the operator's module requires) from their Go modules into a
# cache outside the repo, and copies the CRDs and the operator's ClusterRole of that
# operator version beside them. A second run builds nothing.
# Prints the cache directory (bin/ and crds/ under it) on stdout's last line; progress
# goes to stderr.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=e2e/go-build.sh
source "$here/go-build.sh"
version="v0.85.0"
go_build_cache prometheus-operator "$here/monitoring" "$version" "$here/prometheus-server"

package=github.com/prometheus-operator/prometheus-operator
version_ldflags="-s -w -X github.com/prometheus/common/version.Version=${version#v}"
go_build prometheus-operator "$package/cmd/operator" "$version_ldflags"
go_build prometheus-config-reloader "$package/cmd/prometheus-config-reloader" "$version_ldflags"
# Prometheus with the one service discovery its pods use, not two dozen clouds' SDKs: its
# README's way is a plugins.yml and `make plugins`, which rewrites plugins/plugins.go: the
# build uses a copy of the module (patched_module) with e2e/prometheus-server/plugins.go.in
# in that file's place.
server="$here/prometheus-server"
kubernetes_discovery_only() {  # the copy's directory
    cp "$server/plugins.go.in" "$1/plugins/plugins.go"
}
patched_module prometheus "$server" github.com/prometheus/prometheus kubernetes_discovery_only
go_build prometheus github.com/prometheus/prometheus/cmd/prometheus \
    "-s -w -X github.com/prometheus/common/version.Version=3.5.0" "$server" "$cache/prometheus.mod"
if [[ ! -d "$cache/crds" ]]; then
    source_dir="$(cd "$module" && go list -m -f '{{.Dir}}' "$package")"
    mkdir -p "$cache/crds.tmp"
    cp "$source_dir"/example/prometheus-operator-crd/monitoring.coreos.com_*.yaml "$cache/crds.tmp/"
    # The operator's own ClusterRole, as the project ships it.
    cp "$source_dir"/example/rbac/prometheus-operator/prometheus-operator-cluster-role.yaml \
        "$cache/crds.tmp/../cluster-role.yaml.tmp"
    chmod u+w "$cache"/crds.tmp/*.yaml "$cache/cluster-role.yaml.tmp"
    mv "$cache/cluster-role.yaml.tmp" "$cache/cluster-role.yaml"
    mv "$cache/crds.tmp" "$cache/crds"
    log "CRDs and the operator's ClusterRole copied from $package@$version"
fi
echo "$cache"
