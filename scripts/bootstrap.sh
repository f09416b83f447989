#!/usr/bin/env bash
# Create (idempotently) the project venv .venv with judge-gateway installed editable, plus dev
# tools (selenium for the browser tests), the results browser's jinja2 + matplotlib, and the OCR
# head's RapidOCR + onnxruntime (the embedded default config's `ocr` judge runs
# its worker under this venv's interpreter; its models ship in the wheel). Re-runs are fast:
# nothing happens while pyproject.toml is unchanged and the venv imports.
#
# Usage: scripts/bootstrap.sh [--extras dev,tune,heads,...]   (default: dev,tune,redis,ocr,browse)
#   JG_VENV    venv path (default: <repo>/.venv)
#   JG_PYTHON  interpreter used to create it (default: python3, must be >= 3.11)
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${JG_VENV:-$REPO_ROOT/.venv}"
BASE_PYTHON="${JG_PYTHON:-python3}"
EXTRAS="dev,tune,redis,ocr,browse"

while [[ $# -gt 0 ]]; do
    case "$1" in
        --extras) EXTRAS="$2"; shift 2 ;;
        -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "bootstrap: unknown argument: $1" >&2; exit 2 ;;
    esac
done

log() { echo "[bootstrap] $*"; }

stamp="$VENV/.judge-gateway-stamp"
want="$(cat "$REPO_ROOT/pyproject.toml" | sha256sum | cut -c1-16)-$EXTRAS"
if [[ -x "$VENV/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]] \
        && "$VENV/bin/python" -c "import judge_gateway" >/dev/null 2>&1; then
    log "venv $VENV is up to date"
    exit 0
fi

if ! "$BASE_PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    echo "bootstrap: $BASE_PYTHON is $("$BASE_PYTHON" --version 2>&1); judge-gateway needs Python >= 3.11" >&2
    exit 1
fi
[[ -x "$VENV/bin/python" ]] || { log "creating $VENV"; "$BASE_PYTHON" -m venv "$VENV"; }

log "installing judge-gateway[$EXTRAS] (editable)"
set +e
# pip here prints many harmless "Location ... is ignored" lines: keep only the rest.
PIP_DISABLE_PIP_VERSION_CHECK=1 "$VENV/bin/python" -m pip install -q -e "$REPO_ROOT[$EXTRAS]" 2>&1 \
    | grep -v -E "Location .* is ignored"
status=${PIPESTATUS[0]}
set -e
[[ $status -eq 0 ]] || { echo "bootstrap: pip install failed (exit $status)" >&2; exit "$status"; }
"$VENV/bin/python" -c "import judge_gateway" 
echo "$want" > "$stamp"
log "ready: $VENV/bin/judge-gateway"
