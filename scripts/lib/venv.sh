# Shared plumbing of the scripts/setup_*.sh venv scripts; source it, do not run it.
#
# The sourcing script sets, before calling `venv_begin "$@"`:
#   TAG      its log tag, e.g. setup_heads
#   VENV     the venv path
#   IMPORTS  a Python statement that succeeds once the venv is complete
#   HELP_TO  the last line of the script's header comment (printed by --help)
# venv_begin parses --force/--help, exits 0 when the venv already imports everything (unless
# --force), creates the venv, and starts the clock ($start) for venv_done.

BASE_PYTHON="${JG_PYTHON:-python3}"
FORCE=0

log() { echo "[$TAG] $*"; }

check_import() {
    [[ -x "$VENV/bin/python" ]] && "$VENV/bin/python" -c "$IMPORTS" >/dev/null 2>&1
}

# pip here prints hundreds of harmless "Location ... is ignored" warnings: drop them, keep errors
# and pip's exit status.
pip_quiet() {
    local status
    set +e
    "$VENV/bin/python" -m pip "$@" 2>&1 | grep -v -E "Location .* is ignored|^\s*$"
    status=${PIPESTATUS[0]}
    set -e
    if [[ $status -ne 0 ]]; then
        echo "[$TAG] pip $* failed (exit $status)" >&2
        return "$status"
    fi
}

venv_begin() {
    local arg
    for arg in "$@"; do
        case "$arg" in
            --force) FORCE=1 ;;
            -h|--help) sed -n "2,${HELP_TO}p" "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
            *) echo "$TAG: unknown argument: $arg" >&2; exit 2 ;;
        esac
    done
    if [[ $FORCE -eq 0 ]] && check_import; then
        log "venv ready at $VENV ($IMPORTS works); nothing to do"
        exit 0
    fi
    start=$SECONDS
    if [[ ! -x "$VENV/bin/python" ]]; then
        log "creating venv $VENV with $BASE_PYTHON ($("$BASE_PYTHON" --version 2>&1))"
        "$BASE_PYTHON" -m venv "$VENV"
    fi
    export PIP_DISABLE_PIP_VERSION_CHECK=1
}

# Fail loudly when the venv still does not import everything; else say how long it took.
venv_done() {
    if ! check_import; then
        echo "[$TAG] ERROR: '$IMPORTS' still fails in $VENV:" >&2
        "$VENV/bin/python" -c "$IMPORTS" 2>&1 | tail -20 >&2 || true
        exit 1
    fi
    log "done in $((SECONDS - start)) s: $*"
}
