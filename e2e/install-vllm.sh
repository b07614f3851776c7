#!/usr/bin/env bash
# vLLM 0.33 in its own cached venv outside the repo, for the runtime's contract test
# (every argv we render must pass vLLM's own parser). It is several GB with torch, so
# it is not a dev dependency of the project venv. Prints the interpreter's path.
set -euo pipefail
version="0.33.0"
venv="${SPECFLEET_CACHE:-$HOME/.cache/specfleet}/vllm-$version"
# One install per cache at a time: a second checkout waits instead of writing the
# same venv concurrently.
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
if ! flock -n 9; then
    echo "[install] another install holds $venv.lock; waiting for it" >&2
    flock 9
fi
if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c "import vllm" 2>/dev/null; then
    echo "[install] vllm==$version into $venv (about 9 GB, a few minutes, once)" >&2
    python3 -m venv "$venv"
    "$venv/bin/pip" install --disable-pip-version-check -q "vllm==$version" >&2
fi
echo "$venv/bin/python"
