#!/usr/bin/env bash
# rill-loadtest against rill-server on the GPU machine: a rate sweep over HTTP on the
# Llama-2-7B shape (fp16) and on the Llama-3-8B shape (bf16), each to saturation, with the
# JSON, CSV and HTML report of each. Binaries built here with CMAKE_CUDA_ARCHITECTURES=90a and
# carried (rill-make-model from build_here.sh's build-device/bin also works):
#   scripts/device/loadtest_check.sh BIN_DIR LIB_DIR [7b] [8b]
# Reports go to $OUT/loadtest_<shape>.{json,csv,html}, logs to $OUT/loadtest_<shape>.txt.
set -u
bin=$1 lib=$2
shift 2
export LD_LIBRARY_PATH=$lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
sweep() {  # sweep SHAPE MODEL_DIR DTYPE RATES
  local shape=$1 model=$2 dtype=$3 rates=$4
  "$bin/rill-server" --model "$model" --device cuda --dtype "$dtype" --host 127.0.0.1 --http-port 0 --grpc-port 0 \
    --max-num-seqs 256 --max-batch 256 --max-num-batched-tokens 8192 --log-level warn \
    >"$OUT/server_${shape}_stdout.txt" 2>"$OUT/server_${shape}_stderr.txt" &
  local pid=$! port=""
  for _ in $(seq 1 240); do
    port=$(grep -o '"http_port":[0-9]*' "$OUT/server_${shape}_stdout.txt" 2>/dev/null | cut -d: -f2)
    [ -n "$port" ] && grep -q '"event":"ready"' "$OUT/server_${shape}_stdout.txt" && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.5
  done
  if [ -z "$port" ]; then echo "$shape: server did not start"; tail -20 "$OUT/server_${shape}_stderr.txt"; kill $pid 2>/dev/null; return 1; fi
  # 512-token prompts, 128-token answers; 20 s per point, the first 16 requests a warm-up.
  timeout 420 "$bin/rill-loadtest" --http 127.0.0.1:$port --sweep "$rates" --duration 20 --num-requests 100000 \
    --warmup-requests 16 --input-len 512 --input-len-dist uniform:0.25 --output-len 128 \
    --slo ttft:1000,tpot:50 --out "$OUT/loadtest_$shape" --html "$OUT/loadtest_$shape.html" 2>&1 |
    tee "$OUT/loadtest_$shape.txt" | tail -40
  kill -TERM $pid
  wait $pid
  echo "$shape: rill-server exit status after SIGTERM: $?"
}
shapes=("$@")
[ ${#shapes[@]} -gt 0 ] || shapes=(7b 8b)
for shape in "${shapes[@]}"; do
  case $shape in
    7b)
      [ -d /tmp/llama2-7b ] || "$bin/rill-make-model" --config llama2-7b --out /tmp/llama2-7b >/dev/null
      sweep 7b /tmp/llama2-7b float16 4,8,16,24,32,48,64 ;;
    8b)
      [ -d /tmp/llama3-8b ] || "$bin/rill-make-model" --config llama3-8b --out /tmp/llama3-8b >/dev/null
      sweep 8b /tmp/llama3-8b bfloat16 4,8,16,24,32,48,64 ;;
  esac
done
