#!/usr/bin/env bash
# Issue 30's structured-output targets on the GPU machine, on the Llama-3-8B shape (random
# weights, rill-make-model; its 128,256-token vocabulary): 64 concurrent HTTP streams of 512 +
# 512 tokens (scripts/device/server_tpot.py) three ways against one rill-server:
#   none  no stream constrained (the baseline);
#   all   all 64 held to a JSON schema (response_format json_schema; target: TPOT within 5%);
#   some  8 of 64 constrained (target: the other 56 streams' TPOT within 1% of the baseline).
# A warm-up request compiles the schema first (the ConstraintCache keeps it), so the runs
# measure decoding, not compilation. Each run prints the client TPOT per group, the engine's
# TPOT and the mean host time of a grammar mask (rill_grammar_mask_seconds). rill-server and
# rill-make-model built here with CMAKE_CUDA_ARCHITECTURES=90a and carried with their libraries
# (as for server_check.sh):
#   scripts/device/structured_check.sh BIN_DIR LIB_DIR
# Output: $OUT/structured_<run>.txt and the server's log $OUT/structured_server.txt.
set -u
bin=$1 lib=$2
export LD_LIBRARY_PATH=$lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm --format=csv,noheader
[ -d /tmp/llama3-8b ] || "$bin/rill-make-model" --config llama3-8b --out /tmp/llama3-8b >/dev/null
"$bin/rill-server" --model /tmp/llama3-8b --device cuda --host 127.0.0.1 --http-port 0 --grpc-port 0 \
  --max-num-seqs 64 --max-batch 64 --max-num-batched-tokens 8192 --log-level warn \
  >"$OUT/structured_server.txt" 2>&1 &
pid=$!
port=""
for _ in $(seq 1 480); do  # the ports come first, then "ready" once the model is loaded
  port=$(grep -o '"http_port":[0-9]*' "$OUT/structured_server.txt" 2>/dev/null | cut -d: -f2)
  [ -n "$port" ] && grep -q '"event":"ready"' "$OUT/structured_server.txt" && break
  kill -0 $pid 2>/dev/null || break
  sleep 0.5
done
if [ -z "$port" ]; then echo "server did not start"; tail -20 "$OUT/structured_server.txt"; kill $pid 2>/dev/null; exit 1; fi
tpot() {  # tpot NAME ARGS...
  echo "--- $1"
  local name=$1
  shift
  timeout 300 python3 scripts/device/server_tpot.py --http 127.0.0.1:$port --vocab 128000 "$@" 2>&1 |
    tee "$OUT/structured_$name.txt"
}
tpot warmup --streams 1 --constrained 1 --prompt-len 16 --max-tokens 8
tpot none --streams 64 --prompt-len 512 --max-tokens 512
tpot all --streams 64 --constrained 64 --prompt-len 512 --max-tokens 512
tpot some --streams 64 --constrained 8 --prompt-len 512 --max-tokens 512
tpot none_again --streams 64 --prompt-len 512 --max-tokens 512  # the baseline's drift
kill -TERM $pid
wait $pid
echo "rill-server exit status after SIGTERM: $?"
