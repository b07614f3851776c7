# Sourced by the build-*.sh scripts: one cache directory per Go module and its pinned
# versions, one build at a time per cache, and progress on stderr during long builds.
# Usage: go_build_cache NAME MODULE_DIR VERSION [MODULE_DIR...]
#            (sets $module to the first, $cache, $bin; the key covers every module; locks)
#        go_build BINARY PACKAGE LDFLAGS [MODULE_DIR [GO_MOD]]
#            (in $module unless given; skips a binary already in $bin; GO_MOD: a go.mod
#            to build with instead of the module's, `go build -modfile`)
#        patched_module NAME MODULE_DIR PACKAGE EDIT
#            (a copy of a dependency's module with some files changed; sets $source_dir)

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

# A writable copy of PACKAGE's module (the version MODULE_DIR's go.mod pins) at
# $cache/NAME-source, made once with the function EDIT run in it, and $cache/NAME.mod:
# MODULE_DIR's go.mod with PACKAGE replaced by that copy, for go_build's GO_MOD. The module
# cache is read-only, and `go build -overlay` may not touch it. The module is downloaded
# first: on a new machine nothing may have fetched it, and `go list -m` names no directory
# for a module not in the module cache. Sets $source_dir to the module cache's copy.
patched_module() {
    local name="$1" dir="$2" package="$3" edit="$4" copy="$cache/$1-source"
    source_dir="$(cd "$dir" && go mod download "$package" && go list -m -f '{{.Dir}}' "$package")"
    if [[ ! -d "$source_dir" ]]; then
        log "no source directory for $package in the module cache"
        exit 1
    fi
    if [[ ! -d "$copy" ]]; then
        rm -rf "$copy.tmp"
        cp -r "$source_dir" "$copy.tmp"
        chmod -R u+w "$copy.tmp"
        "$edit" "$copy.tmp"
        mv "$copy.tmp" "$copy"
    fi
    { cat "$dir/go.mod"; echo "replace $package => $copy"; } >"$cache/$name.mod"
    cp "$dir/go.sum" "$cache/$name.sum"
}
