#!/usr/bin/env bash
# Issue 28's Llama-3-8B targets on the GPU machine: batch-1 TPOT with fp8 weights (<= 3.1 ms,
# beside bf16 in the same session), and 1,000 requests of 256 + 256 tokens sent at once to
# rill-server over HTTP (rill-loadtest, 1,000 client slots; target >= 18,000 output tok/s with
# fp8), bf16 first as the baseline. Binaries built here for 90a and carried: rill-bench,
# rill-server, rill-loadtest, rill-make-model.
#   scripts/device/fp8_serve_check.sh BIN_DIR LIB_DIR [bench] [http] [trace]
# trace: each kernel's share of an fp8 decode step at batch 256, 384 cached (rill-bench --trace),
# where the 1,000-request run spends its steps. KV=fp8 adds --kv-cache-dtype fp8 to every run
# (the reports' names end in _kvfp8). SERVER_FLAGS (e.g. "--tpot-aware false") adds server flags
# and TAG a suffix to the reports' names. Sections: bench, http (bf16 then fp8), http-none,
# http-fp8, trace.
# Logs and the loadtest reports go to $OUT/fp8serve_*.
set -u
bin=$1 lib=$2
shift 2
export LD_LIBRARY_PATH=$lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
model=/tmp/llama3-8b
kv=() tag="${TAG:-}"
if [ "${KV:-}" = fp8 ]; then kv=(--kv-cache-dtype fp8) tag=${tag}_kvfp8; fi
read -r -a extra <<<"${SERVER_FLAGS:-}"
[ -f $model/config.json ] || "$bin/rill-make-model" --config llama3-8b --out $model >/dev/null
http() {  # http QUANTIZATION
  local q=$1 log=$OUT/fp8serve_server_$1$tag
  "$bin/rill-server" --model $model --device cuda --dtype bfloat16 --quantization "$q" "${kv[@]}" --host 127.0.0.1 \
    --http-port 0 --grpc-port 0 --max-num-seqs 256 --max-batch 256 --max-num-batched-tokens 8192 \
    --log-level warn "${extra[@]}" >"$log.out" 2>"$log.err" &
  local pid=$! port=""
  for _ in $(seq 1 240); do  # the ports come first, then "ready" once the model is loaded
    port=$(grep -o '"http_port":[0-9]*' "$log.out" 2>/dev/null | cut -d: -f2)
    [ -n "$port" ] && grep -q '"event":"ready"' "$log.out" && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.5
  done
  if [ -z "$port" ]; then echo "$q: server did not start"; tail -20 "$log.err"; kill $pid 2>/dev/null; return 1; fi
  echo "=== $q: rill-loadtest, 1,000 x 256 + 256 at once ($(date +%T))"
  timeout 240 "$bin/rill-loadtest" --http 127.0.0.1:$port --concurrency 1000 --num-requests 1000 \
    --input-len 256 --output-len 256 --out "$OUT/fp8serve_$q$tag" >"$OUT/fp8serve_$q$tag.txt" 2>&1
  echo "=== rc=$?"
  tail -25 "$OUT/fp8serve_$q$tag.txt"
  kill -TERM $pid
  wait $pid
  echo "$q: rill-server exit status after SIGTERM: $?"
}
sections=("$@")
[ ${#sections[@]} -gt 0 ] || sections=(bench http)
for s in "${sections[@]}"; do
  case $s in
    bench)
      for q in none fp8; do
        echo "=== rill-bench $q ($(date +%T))"
        timeout 200 "$bin/rill-bench" --model $model --quantization $q "${kv[@]}" --batch 1 --context 512 --prefill 0 \
          --steps 64 >"$OUT/fp8serve_bench_$q$tag.txt" 2>&1
        echo "=== rc=$?"
        grep -v "^\[" "$OUT/fp8serve_bench_$q$tag.txt" | tail -8
      done ;;
    http) http none; http fp8 ;;
    http-none) http none ;;
    http-fp8) http fp8 ;;
    trace)
      timeout 200 "$bin/rill-bench" --model $model --quantization fp8 "${kv[@]}" --batch 256 --context 384 \
        --prefill 0 --max-batch 256 --steps 16 --trace >"$OUT/fp8serve_trace$tag.txt" 2>&1
      echo "=== rc=$?"
      grep -v "^\[" "$OUT/fp8serve_trace$tag.txt" | tail -30 ;;
    *) echo "unknown section $s (bench, http, http-none, http-fp8, trace)"; exit 2 ;;
  esac
done
