#!/usr/bin/env bash
# Debian packages the tests use for real: Prometheus (server and promtool); Lua 5.4 (the
# Argo CD health check in docs/gitops.md is run by tests/test_chart_gitops.py); and the
# daemonless image tools (`make images`, e2e/images.py): buildah builds, mmdebstrap makes
# the Debian base, umoci unpacks, runc runs, skopeo copies to a registry; iproute2's `ip`
# gives the local cluster's pods their network namespaces, veth pairs and bridge.
set -euo pipefail
tools=(promtool prometheus lua5.4 buildah mmdebstrap umoci runc skopeo ip)
missing=0
for tool in "${tools[@]}"; do
    command -v "$tool" >/dev/null || missing=1
done
((missing)) || exit 0
packages=(prometheus lua5.4 buildah mmdebstrap umoci runc skopeo iproute2)
echo "[install] ${packages[*]} (Debian packages)" >&2
sudo=""
[[ $(id -u) -eq 0 ]] || sudo="sudo"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
# The package starts a system service; the tests run their own server on loopback.
$sudo systemctl disable --now prometheus >/dev/null 2>&1 || true
$sudo pkill -x prometheus >/dev/null 2>&1 || true
