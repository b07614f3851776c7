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
# The module cache is read-only, so the build uses a copy of the module: its scaler
# builder is e2e/keda/scalers_builder.go.in (the switch over trigger types cut to the
# three), and pkg/scalers keeps those scalers' files (the package's own code is
# scaler.go; each other file is one scaler) and the one constant they take from another
# (e2e/keda/scalers_shared.go.in). A trigger of another type is refused by
# KEDA as an unknown one ("no scaler found for type").
source_copy="$cache/keda-source"
# The module's source, downloaded first: on a new machine nothing has fetched it yet, and
# `go list -m` names no directory for a module that is not in the module cache.
source_dir="$(cd "$module" && go mod download "$package" && go list -m -f '{{.Dir}}' "$package")"
if [[ ! -d "$source_dir" ]]; then
    log "no source directory for $package@$version in the module cache"
    exit 1
fi
if [[ ! -d "$source_copy" ]]; then
    rm -rf "$source_copy.tmp"
    cp -r "$source_dir" "$source_copy.tmp"
    chmod -R u+w "$source_copy.tmp"
    cp "$module/scalers_builder.go.in" "$source_copy.tmp/pkg/scaling/scalers_builder.go"
    find "$source_copy.tmp/pkg/scalers" -maxdepth 1 -name '*.go' \
        ! -name scaler.go ! -name cpu_memory_scaler.go ! -name prometheus_scaler.go -delete
    cp "$module/scalers_shared.go.in" "$source_copy.tmp/pkg/scalers/shared.go"
    mv "$source_copy.tmp" "$source_copy"
fi
{ cat "$module/go.mod"; echo "replace $package => $source_copy"; } > "$cache/keda.mod"
cp "$module/go.sum" "$cache/keda.sum"
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
