#!/usr/bin/env bash
# Builds KEDA's operator and its metrics API server from the Go module pinned in e2e/keda
# into a cache outside the repo, and copies the CRDs of that same module version beside
# them. A second run builds nothing. KEDA links the SDK of every scaler it knows (Kafka,
# Mongo, the clouds' queues...), the heaviest of the tests' builds: the build keeps the
# scalers the tests and examples use (cpu, memory, prometheus), as Prometheus keeps one
# service discovery (build-monitoring.sh). The rest of KEDA is its own code, unchanged.
# Prints the cache directory (bin/ and crds/ under it) on stdout's last line; progress
# goes to stderr.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=e2e/go-build.sh
source "$here/go-build.sh"
version="v2.21.0"
go_build_cache keda "$here/keda" "$version"

package=github.com/kedacore/keda/v2
# A copy of the module (patched_module): its scaler builder is
# e2e/keda/scalers_builder.go.in (the switch over trigger types cut to the three), and
# pkg/scalers keeps those scalers' files (the package's own code is scaler.go; each other
# file is one scaler) and the one constant they take from another
# (e2e/keda/scalers_shared.go.in). A trigger of another type is refused by KEDA as an
# unknown one ("no scaler found for type").
keep_three_scalers() {  # the copy's directory
    cp "$module/scalers_builder.go.in" "$1/pkg/scaling/scalers_builder.go"
    find "$1/pkg/scalers" -maxdepth 1 -name '*.go' \
        ! -name scaler.go ! -name cpu_memory_scaler.go ! -name prometheus_scaler.go -delete
    cp "$module/scalers_shared.go.in" "$1/pkg/scalers/shared.go"
}
patched_module keda "$module" "$package" keep_three_scalers
version_ldflags="-s -w -X $package/version.Version=${version#v}"
go_build keda "$package/cmd/operator" "$version_ldflags" "$module" "$cache/keda.mod"
go_build keda-adapter "$package/cmd/adapter" "$version_ldflags" "$module" "$cache/keda.mod"
if [[ ! -d "$cache/crds" ]]; then
    mkdir -p "$cache/crds.tmp"
    cp "$source_dir"/config/crd/bases/*.yaml "$cache/crds.tmp/"
    chmod u+w "$cache"/crds.tmp/*.yaml
    mv "$cache/crds.tmp" "$cache/crds"
    log "CRDs copied from $package@$version"
fi
echo "$cache"
