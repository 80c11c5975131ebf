#!/usr/bin/env bash
# Automatic prefix caching on the GPU machine: issue 29's targets on the Llama-3-8B shape (bf16,
# rill-make-model), rill-server with the cache on and off (--no-prefix-caching), driven by
# rill-loadtest over HTTP (docs/performance.md records the figures):
#   shared-prefix  32 groups of a 2,048-token system prompt, each request its own 128-token
#                  question and 128 output tokens (SGLang's generated-shared-prefix): an open-loop
#                  rate sweep to saturation each way. Target: TTFT p50 at the rate where the
#                  cache-off server nears saturation <= 25% of cache-off; saturation throughput
#                  >= 1.5x.
#   multi-turn     chats of 20 turns, each 100 new tokens + 100 generated, the history re-sent
#                  every turn (16 conversations at a time). Target: TTFT at turn 20 within 2x of
#                  turn 1 (cache off: it grows with the history).
#   no-hit         random prompts (0% hits): 256 concurrent streams of 512 + 256 tokens, off / on /
#                  off / on. Target: TPOT and throughput within 1% of cache-off.
#   summary        the figures above from the reports (scripts/device/prefix_cache_summary.py).
# Binaries built here with CMAKE_CUDA_ARCHITECTURES=90a and carried (rill-server, rill-loadtest,
# rill-make-model):
#   scripts/device/prefix_cache_check.sh BIN_DIR LIB_DIR [shared-prefix] [multi-turn] [no-hit] [summary]
# MODES="off on" (default) picks the servers a section runs, so a section can be split across
# commands of at most 10 minutes (shared-prefix takes about 4 minutes a mode). Reports go to
# $OUT/prefix_<section>_<mode>[_<n>].{json,csv,html}, logs to $OUT/prefix_*.txt.
set -u
bin=$1 lib=$2
shift 2
export LD_LIBRARY_PATH=$lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
model=/tmp/llama3-8b
modes=${MODES:-off on}
server_pid="" port=""

start_server() {  # start_server TAG on|off: rill-server in the background; sets server_pid, port
  local tag=$1 mode=$2 extra=()
  if [ "$mode" = off ]; then extra=(--no-prefix-caching); else extra=(--prefix-caching true); fi
  "$bin/rill-server" --model "$model" --device cuda --dtype bfloat16 --host 127.0.0.1 --http-port 0 \
    --grpc-port 0 --max-num-seqs 256 --max-batch 256 --max-num-batched-tokens 8192 --log-level warn \
    "${extra[@]}" >"$OUT/prefix_server_${tag}_stdout.txt" 2>"$OUT/prefix_server_${tag}_stderr.txt" &
  server_pid=$!
  port=""
  for _ in $(seq 1 240); do  # the ports come first, then "ready" once the model is loaded
    port=$(grep -o '"http_port":[0-9]*' "$OUT/prefix_server_${tag}_stdout.txt" 2>/dev/null | cut -d: -f2)
    [ -n "$port" ] && grep -q '"event":"ready"' "$OUT/prefix_server_${tag}_stdout.txt" && return 0
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.5
  done
  echo "$tag: server did not start"
  tail -20 "$OUT/prefix_server_${tag}_stderr.txt"
  kill "$server_pid" 2>/dev/null
  return 1
}

stop_server() {
  kill -TERM "$server_pid"
  wait "$server_pid"
  echo "rill-server exit status after SIGTERM: $?"
}

loadtest() {  # loadtest NAME TIMEOUT_S ARGS...: one rill-loadtest run against the server
  local name=$1 tmo=$2
  shift 2
  echo "=== $name: rill-loadtest $* ($(date +%T))"
  timeout "$tmo" "$bin/rill-loadtest" --http "127.0.0.1:$port" --out "$OUT/prefix_$name" \
    --html "$OUT/prefix_$name.html" "$@" >"$OUT/prefix_$name.txt" 2>&1
  echo "=== rc=$?"
  tail -n "${TAIL:-45}" "$OUT/prefix_$name.txt"
}

[ -d "$model" ] || "$bin/rill-make-model" --config llama3-8b --out "$model" >/dev/null
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm --format=csv,noheader
for section in "$@"; do
  case $section in
    shared-prefix)
      for mode in $modes; do
        start_server "shared_$mode" "$mode" || continue
        loadtest "shared-prefix_$mode" 560 --sweep "${RATES:-1,2,3,4,6,8,12,16,24}" --duration 20 \
          --num-requests 100000 --warmup-requests 8 --shared-prefix-groups 32 --shared-prefix-len 2048 \
          --input-len 128 --output-len 128
        stop_server
      done ;;
    multi-turn)
      for mode in $modes; do
        start_server "turns_$mode" "$mode" || continue
        TAIL=60 loadtest "multi-turn_$mode" 560 --turns 20 --input-len 100 --output-len 100 \
          --concurrency 16 --num-requests 640
        stop_server
      done ;;
    no-hit)
      for run in 1 2; do
        for mode in $modes; do
          start_server "nohit_$mode" "$mode" || continue
          loadtest "no-hit_${mode}_$run" 280 --concurrency 256 --num-requests 1024 --warmup-requests 256 \
            --input-len 512 --output-len 256
          stop_server
        done
      done ;;
    summary)
      python3 scripts/device/prefix_cache_summary.py "$OUT" | tee "$OUT/prefix_summary.txt" ;;
    *)
      echo "unknown section $section (shared-prefix, multi-turn, no-hit, summary)" ;;
  esac
done
