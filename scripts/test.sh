#!/usr/bin/env bash
# The test command: set up what the tests need on a fresh machine, then, in two streams side by
# side, the integration tests against a real vLLM OpenAI server on the CPU (a tiny Qwen2.5-VL the
# tests build) and the local heads (worker processes under their own venvs, tiny models the tests
# build); and the unit tests, the docs site (mkdocs --strict), the reliability suite, the
# integration tests that install from a wheel or launch with `up`, and the Ray mode tests. Prints
# each stage's time, and a table of them at the end (also in run/test-stages.tsv).
#
# The environments are built by `judge-gateway env build` from judge_gateway/envs/specs.toml (the
# mechanism `judge-gateway prepare` uses), side by side: two lanes of pip installs, and the
# GenEval environment (its mmcv build, ~10 min of CPU on 2 cores) at low priority in the
# background, overlapping the other set-up and the first test stages; the integration tests that
# need it wait for it (JG_SETUP_PENDING).
#
# Usage: scripts/test.sh [extra pytest args]
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"
LOGS="$REPO_ROOT/run/test-logs"
STAGES="$REPO_ROOT/run/test-stages.tsv"
mkdir -p "$LOGS"
: > "$STAGES"
T0=$SECONDS

print_stages() {
    echo "== stage times (s since start: begin -> end, duration)"
    awk -F'\t' '{ printf "   %-56s %6d -> %6d  %6d s  %s\n", $1, $2, $3, $3 - $2, $4 }' "$STAGES"
    printf "   %-56s %23d s\n" total "$((SECONDS - T0))"
}
# Background stages still running when the command ends (a stage failed) end with it.
kill_tree() {
    local child
    for child in $(ps -o pid= --ppid "$1" 2>/dev/null); do kill_tree "$child"; done
    kill "$1" 2>/dev/null || true
}
declare -A BG_PID=()
finish() {
    local status=$? pid
    for pid in "${BG_PID[@]}"; do kill -0 "$pid" 2>/dev/null && kill_tree "$pid"; done
    print_stages
    exit "$status"
}
trap finish EXIT

# stage NAME COMMAND...: run it, record its begin / end (seconds since the start) and status.
stage() {
    local name="$1" begin=$((SECONDS - T0)) status=0
    shift
    echo "== $name"
    "$@" || status=$?
    printf '%s\t%d\t%d\t%s\n' "$name" "$begin" "$((SECONDS - T0))" "$([[ $status -eq 0 ]] && echo ok || echo "FAILED ($status)")" >> "$STAGES"
    echo "== $name: $((SECONDS - T0 - begin)) s"
    return "$status"
}

# A background stage: its output goes to run/test-logs/NAME.log, shown when it is waited for.
log_of() { local slug="${1//[^A-Za-z0-9.-]/_}"; echo "$LOGS/${slug}.log"; }
background() {
    local name="$1"
    shift
    ( stage "$name" "$@" ) > "$(log_of "$name")" 2>&1 &
    BG_PID[$name]=$!
}
wait_for() {
    local name="$1" status=0
    wait "${BG_PID[$name]}" || status=$?
    echo "== output of $name (background):"
    cat "$(log_of "$name")"
    [[ $status -eq 0 ]] || { echo "== $name FAILED ($status)"; exit "$status"; }
}

env_build() { scripts/lib/env_build.sh "$1" "$REPO_ROOT/$2" --torch auto; }
lane() { local spec; for spec in "$@"; do env_build "${spec%%:*}" "${spec#*:}" || return; done; }

# The Redis result-store tests start their own redis-server (a missing one is a failure); the
# results browser's tests drive Debian's chromium headless through its chromedriver (selenium).
apt_tools() {
    local missing=()
    command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
    command -v chromium >/dev/null 2>&1 || missing+=(chromium)
    command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
    [[ ${#missing[@]} -eq 0 ]] && { echo "redis-server, chromium and chromedriver are installed"; return 0; }
    echo "installing ${missing[*]} (Debian)"
    # Another apt on the machine (a second test run) holds its lock: wait for it, up to 10 min.
    apt-get -o DPkg::Lock::Timeout=600 update -qq && apt-get -o DPkg::Lock::Timeout=600 install -y -qq "${missing[@]}"
}

# Free disk, for the reader of a failed run: the whole command takes 8-9 GB, so 10 GB free is enough (docs/development/testing.md).
echo "== free disk at the start: $(df -h --output=avail "$REPO_ROOT" 2>/dev/null | tail -1 | tr -d ' ') in $REPO_ROOT"
stage "set-up: .venv (bootstrap)" scripts/bootstrap.sh  # the gateway (no torch): dev, tune, redis, ocr, browse extras
# The docs extra (mkdocs-material, mkdocstrings) into .venv now, not beside running tests: pip
# reinstalls the editable package, which a test process starting then could not import.
stage "set-up: docs extra" .venv/bin/python -m pip install -q -e ".[docs]"
# The GenEval venv (its mmcv compile is the longest set-up step) builds beside the rest, and past
# the set-up: the integration stage starts without it, and its tests that need it wait while
# $JG_SETUP_PENDING/.venv-geneval exists (tests/support/heads_env.py).
export JG_SETUP_PENDING="$LOGS/pending"
mkdir -p "$JG_SETUP_PENDING"
touch "$JG_SETUP_PENDING/.venv-geneval"
geneval_setup() {
    local status=0
    nice -n 10 env MAX_JOBS=2 scripts/lib/env_build.sh geneval "$REPO_ROOT/.venv-geneval" --torch auto || status=$?
    rm -f "$JG_SETUP_PENDING/.venv-geneval"
    return "$status"
}
GENEVAL="set-up: .venv-geneval (mmcv build, low priority)"
background "$GENEVAL" geneval_setup
background "set-up: apt (redis-server, chromium)" apt_tools
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# The unit tests that need no worker venv, no redis-server and no browser run during the set-up,
# whose pip installs leave the cores idle while they wait on downloads and disk; the rest of the
# unit tests (worker venvs: heads, latents, a torch for Pref-GRPO's code; redis-server) run after it, in the
# second stream.
UNIT_AFTER_SETUP=(tests/unit/test_clip_gpu_timer.py tests/unit/test_device_video.py
    tests/unit/test_head_sleep_offload.py tests/unit/test_hostile_input.py tests/unit/test_rewards_toml.py
    tests/unit/test_test_harness.py tests/unit/test_comparative_parity.py)
unit_ignore=()
for path in "${UNIT_AFTER_SETUP[@]}"; do unit_ignore+=("--ignore=$path"); done
EARLY="unit tests (during the set-up; no worker venv)"
background "$EARLY" .venv/bin/python -m pytest tests/unit -q --durations=10 "${unit_ignore[@]}" "$@"
background "set-up: lane 2 (hpsv3, imagereward, latents, ray)" \
    lane hpsv3:.venv-hpsv3 imagereward:.venv-imagereward latents:.venv-latents ray:.venv-ray
stage "set-up: lane 1 (vllm, heads, cosmosrl)" lane vllm:.venv-vllm heads:.venv-heads cosmosrl:.venv-cosmosrl
wait_for "set-up: lane 2 (hpsv3, imagereward, latents, ray)"
wait_for "set-up: apt (redis-server, chromium)"
echo "== free disk after the set-up: $(df -h --output=avail "$REPO_ROOT" 2>/dev/null | tail -1 | tr -d ' ')"

# A failing test stage does not stop the later ones (each says what it found); the command fails
# at the end. A failing set-up stage stops it at once: nothing after it could run.
failed=0
# Two streams of test stages side by side: alone, each stage keeps the 2 cores ~60-70% busy (it
# waits on servers, worker start-ups and subprocesses), so one stream fills the other's gaps
# (bench/RESULTS.md, "Test command from nothing"). Stream 1: the integration tests that share the
# session's vLLM and heads gateway. Stream 2: unit tests, the docs site, the reliability suite, the
# integration tests that need neither the session's vLLM nor its heads gateway (a wheel outside the
# repository, `up`, the heads that start gateways of their own: off stream 1, the longer one),
# then Ray mode.
BESIDE=(tests/integration/test_wheel_install.py tests/integration/test_up.py
    tests/integration/test_image_reward.py tests/integration/test_hpsv3.py tests/integration/test_videoalign.py)
# The docs site: a broken link, anchor or page fails (the reference pages' staleness is a unit
# test). No --quiet: it hides the warnings that --strict counts, so a broken link would pass.
docs_site() { NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --site-dir site; }
second_stream() {
    local status=0
    stage "unit tests (worker venvs, redis-server)" .venv/bin/python -m pytest "${UNIT_AFTER_SETUP[@]}" -q \
        --durations=10 "$@" || status=1
    stage "docs site (mkdocs build --strict)" docs_site || status=1
    # -s: each test prints its figures ([reliability] lines: cases, status codes, recovered in s, lost)
    # --timeout (pytest-timeout, the dev extra): a test that hangs (a server that never answers, a lost
    # process) fails after 15 min instead of stalling the run; the slowest takes ~2 min.
    stage "reliability suite" .venv/bin/python -m pytest tests/reliability -q -s --timeout=900 "$@" || status=1
    stage "integration tests: from a wheel, up, heads on their own" .venv/bin/python -m pytest "${BESIDE[@]}" -q --durations=10 \
        "$@" || status=1
    stage "Ray mode tests (.venv-ray; two-node local Ray cluster)" \
        .venv-ray/bin/python -m pytest tests/ray -q -p no:warnings --timeout=900 "$@" || status=1
    return "$status"
}
SECOND="stream 2: unit, docs site, reliability, integration (wheel, up, heads), Ray"
background "$SECOND" second_stream "$@"
# --durations: the slowest tests, where CI time goes.
ignore=()
for path in "${BESIDE[@]}"; do ignore+=("--ignore=$path"); done
stage "integration tests (real vLLM on CPU, local heads)" .venv/bin/python -m pytest tests/integration -q \
    "${ignore[@]}" --durations=25 "$@" || failed=1
# The background stages' status is the test command's too; each one's output is shown once it ends.
collect() {
    local status=0
    wait "${BG_PID[$1]}" || status=$?
    echo "== output of $1 (background):"
    cat "$(log_of "$1")"
    [[ $status -eq 0 ]] || failed=1
}
collect "$GENEVAL"  # ended by now: the integration tests that need it waited for it
collect "$EARLY"
collect "$SECOND"
exit "$failed"
