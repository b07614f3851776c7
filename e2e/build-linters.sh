#!/usr/bin/env bash
# Builds the manifest linters (e2e/linters: kubeconform v0.8.0 and kube-score v1.20.0)
# from their Go modules into a cache outside the repo. A second run builds nothing.
# Prints the cache directory (bin/ under it) on stdout's last line; progress goes to
# stderr.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=e2e/go-build.sh
source "$here/go-build.sh"
go_build_cache linters "$here/linters" "kubeconform-v0.8.0-kube-score-v1.20.0"

go_build kubeconform github.com/yannh/kubeconform/cmd/kubeconform "-s -w"
go_build kube-score github.com/zegl/kube-score/cmd/kube-score \
    "-s -w -X main.version=1.20.0"
echo "$cache"
