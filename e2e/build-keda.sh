#!/usr/bin/env bash
# Builds KEDA's operator and its metrics API server from the Go module pinned in e2e/keda
# into a cache outside the repo, and copies the CRDs of that same module version beside
# them. A second run builds nothing. The cold build is the heaviest of the tests' builds
# (KEDA links every scaler's SDK): tens of minutes on two cores.
# Prints the cache directory (bin/ and crds/ under it) on stdout's last line; progress
# goes to stderr.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=e2e/go-build.sh
source "$here/go-build.sh"
version="v2.21.0"
go_build_cache keda "$here/keda" "$version"

package=github.com/kedacore/keda/v2
version_ldflags="-s -w -X $package/version.Version=${version#v}"
go_build keda "$package/cmd/operator" "$version_ldflags"
go_build keda-adapter "$package/cmd/adapter" "$version_ldflags"
if [[ ! -d "$cache/crds" ]]; then
    source_dir="$(cd "$module" && go list -m -f '{{.Dir}}' "$package")"
    mkdir -p "$cache/crds.tmp"
    cp "$source_dir"/config/crd/bases/*.yaml "$cache/crds.tmp/"
    chmod u+w "$cache"/crds.tmp/*.yaml
    mv "$cache/crds.tmp" "$cache/crds"
    log "CRDs copied from $package@$version"
fi
echo "$cache"
