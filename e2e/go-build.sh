# Sourced by the build-*.sh scripts: one cache directory per Go module and its pinned
# versions, one build at a time per cache, and progress on stderr during long builds.
# Usage: go_build_cache NAME MODULE_DIR VERSION [MODULE_DIR...]
#            (sets $module to the first, $cache, $bin; the key covers every module; locks)
#        go_build BINARY PACKAGE LDFLAGS [MODULE_DIR [GO_MOD]]
#            (in $module unless given; skips a binary already in $bin; GO_MOD: a go.mod
#            to build with instead of the module's, `go build -modfile`)

go_build_cache() {
    local name="$1" version="$3" key dir
    local modules=("$2" "${@:4}")
    module="$2"
    # A module's *.go.in files replace sources of its dependencies in its builds.
    key="$(for dir in "${modules[@]}"; do
        cat "$dir/go.mod" "$dir/go.sum"
        for file in "$dir"/*.go.in; do  # in the glob's sorted order: a stable key
            if [[ -e "$file" ]]; then cat "$file"; fi
        done
    done | sha256sum | cut -c1-12)"
    cache="${SPECFLEET_CACHE:-$HOME/.cache/specfleet}/$name/$version-$key"
    bin="$cache/bin"
    log_name="$name"
    mkdir -p "$bin"
    # Two checkouts building at once would both write "$bin/NAME.tmp" and one would
    # fail to move the other's file into place.
    exec 9>"$cache/.lock"
    if ! flock -n 9; then
        log "another build holds $cache/.lock; waiting for it"
        flock 9
    fi
}

log() { printf '[build-%s] %s\n' "${log_name:-go}" "$*" >&2; }

go_build() {
    local name="$1" pkg="$2" ldflags="$3" dir="${4:-$module}" modfile="${5:-}" started elapsed pid
    if [[ -x "$bin/$name" ]]; then
        log "$name: cached"
        return
    fi
    log "$name: building $pkg (a cold build takes minutes)"
    started=$SECONDS
    (cd "$dir" && CGO_ENABLED=0 go build -trimpath ${modfile:+-modfile "$modfile"} \
        -ldflags "$ldflags" -o "$bin/$name.tmp" "$pkg") &
    pid=$!
    # Poll each second (a build that ends is seen at once), say so every 30 s.
    while kill -0 "$pid" 2>/dev/null; do
        sleep 1
        if (((SECONDS - started) % 30 == 0)) && kill -0 "$pid" 2>/dev/null; then
            log "$name: still building, $((SECONDS - started))s"
        fi
    done
    wait "$pid"
    mv "$bin/$name.tmp" "$bin/$name"
    elapsed=$((SECONDS - started))
    log "$name: built in ${elapsed}s"
}
