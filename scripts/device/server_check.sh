#!/usr/bin/env bash
# rill-server on the GPU machine: the Llama-2-7B shape, 64 concurrent HTTP streams of 512 + 512
# tokens (scripts/device/server_tpot.py: client TPOT beside the engine's), then SIGTERM and a
# drained exit. Binaries built here with CMAKE_CUDA_ARCHITECTURES=90a and carried:
#   scripts/device/server_check.sh BIN_DIR LIB_DIR
# Logs go to $OUT/server_*.txt.
set -u
bin=$1 lib=$2
export LD_LIBRARY_PATH=$lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
[ -d /tmp/llama2-7b ] || "$bin/rill-make-model" --config llama2-7b --out /tmp/llama2-7b >/dev/null
"$bin/rill-server" --model /tmp/llama2-7b --device cuda --host 127.0.0.1 --http-port 0 --grpc-port 0 \
  --max-num-seqs 64 --max-batch 64 --max-num-batched-tokens 8192 --log-level warn \
  >"$OUT/server_stdout.txt" 2>"$OUT/server_stderr.txt" &
pid=$!
port=""
for _ in $(seq 1 240); do  # the ports come first, then "ready" once the model is loaded
  port=$(grep -o '"http_port":[0-9]*' "$OUT/server_stdout.txt" 2>/dev/null | cut -d: -f2)
  [ -n "$port" ] && grep -q '"event":"ready"' "$OUT/server_stdout.txt" && break
  kill -0 $pid 2>/dev/null || break
  sleep 0.5
done
if [ -z "$port" ]; then echo "server did not start"; tail -20 "$OUT/server_stderr.txt"; kill $pid 2>/dev/null; exit 1; fi
echo "rill-server listening on HTTP $port"
timeout 300 python3 scripts/device/server_tpot.py --http 127.0.0.1:$port --streams 64 --prompt-len 512 \
  --max-tokens 512 2>&1 | tee "$OUT/server_tpot.txt"
kill -TERM $pid
wait $pid
echo "rill-server exit status after SIGTERM: $?"
