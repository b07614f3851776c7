#!/usr/bin/env bash
# Debian packages the tests use for real: Prometheus (server and promtool), and Lua 5.4
# (the Argo CD health check in docs/gitops.md is run by tests/test_chart_gitops.py).
set -euo pipefail
if command -v promtool >/dev/null && command -v prometheus >/dev/null && command -v lua5.4 >/dev/null; then
    exit 0
fi
echo "[install] prometheus (server and promtool), lua5.4 (Debian packages)" >&2
sudo=""
[[ $(id -u) -eq 0 ]] || sudo="sudo"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends prometheus lua5.4 >/dev/null
# The package starts a system service; the tests run their own server on loopback.
$sudo systemctl disable --now prometheus >/dev/null 2>&1 || true
$sudo pkill -x prometheus >/dev/null 2>&1 || true
