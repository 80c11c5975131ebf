#!/usr/bin/env bash
# GPU check of CudaTuning::async_offload (--async-offload, issue 31): the CUDA session tests,
# then S7 (docs/performance.md: 100 sessions whose idle caches go to host memory beside 16
# running streams, then every second turn restores) with the offload copies on the compute
# stream (default) and beside the steps.
#   scripts/device/build_here.sh && OUT=/tmp scripts/device/offload_check.sh build-device/bin
# Logs go to $OUT/offload_{default,async}.txt and $OUT/offload_{default,async}.json; the tail of
# each (streams' inter-token latency, turns' TTFT, offload and restore times) is printed.
set -u
bin=${1:-build-device/bin}
OUT=${OUT:-/tmp}
export RILL_SOURCE_DIR=$PWD
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
"$bin/cuda_engine_tests" --gtest_filter='CudaSessions.*' 2>&1 | tail -n 12
[ -d /tmp/llama2-7b ] || "$bin/rill-make-model" --config llama2-7b --out /tmp/llama2-7b >/dev/null
for mode in default async; do
  flag=--no-async-offload
  [ "$mode" = async ] && flag=--async-offload
  echo "=== S7 $flag"
  timeout 420 "$bin/rill-session-bench" --model /tmp/llama2-7b --device cuda --mode offload \
    --sessions 100 --first-len 512 --turn-len 64 --answer-len 16 --concurrency 8 --streams 16 \
    --stream-window 1020 --sink 4 --window 1020 --session-gpu-fraction 0.1 \
    --host-kv-cache-bytes 25769803776 $flag --json "$OUT/offload_$mode.json" \
    >"$OUT/offload_$mode.txt" 2>&1
  echo "=== rc=$?"
  tail -n 12 "$OUT/offload_$mode.txt"
done
