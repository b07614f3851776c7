#!/usr/bin/env bash
# stage.sh NAME COMMAND...: run COMMAND as one stage of `make test`, its output untouched
# (stdout included: `$(e2e/stage.sh NAME e2e/install-vllm.sh)` still captures the path),
# and append "NAME<TAB>seconds<TAB>exit status<TAB>start" to $SPECFLEET_STAGES when set.
# pytest prints the table before its closing line (e2e/stages.py); CI reads that line last.
set -uo pipefail
name="$1"
shift
start="$EPOCHREALTIME"
"$@"
status=$?
if [[ -n "${SPECFLEET_STAGES:-}" ]]; then
    mkdir -p "$(dirname "$SPECFLEET_STAGES")"
    seconds="$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')"
    printf '%s\t%s\t%s\t%s\n' "$name" "$seconds" "$status" "$start" >>"$SPECFLEET_STAGES"
fi
exit "$status"
