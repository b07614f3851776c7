#!/usr/bin/env bash
# Builds LeaderWorkerSet's controller manager from the Go module pinned in e2e/lws into a
# cache outside the repo, and copies the CRDs and the webhook configurations (with their
# kustomize patches) of that same module version beside it. A second run builds nothing.
# Prints the cache directory (bin/ and crds/ under it) on stdout's last line; progress
# goes to stderr.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=e2e/go-build.sh
source "$here/go-build.sh"
version="v0.9.0"
go_build_cache lws "$here/lws" "$version"

package=sigs.k8s.io/lws
go_build lws-controller "$package/cmd" "-s -w -X $package/pkg/version.GitVersion=$version"
if [[ ! -d "$cache/crds" ]]; then
    source_dir="$(cd "$module" && go list -m -f '{{.Dir}}' "$package")"
    mkdir -p "$cache/crds.tmp" "$cache/webhook.tmp"
    cp "$source_dir"/config/crd/bases/*.yaml "$cache/crds.tmp/"
    cp "$source_dir"/config/webhook/{manifests,mutating-patch,validating-patch}.yaml \
        "$cache/webhook.tmp/"
    chmod u+w "$cache"/crds.tmp/*.yaml "$cache"/webhook.tmp/*.yaml
    mv "$cache/webhook.tmp" "$cache/webhook"
    mv "$cache/crds.tmp" "$cache/crds"
    log "CRDs and webhook configurations copied from $package@$version"
fi
echo "$cache"
