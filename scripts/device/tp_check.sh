#!/usr/bin/env bash
# Issue 32 on a 2-GPU machine (nvidia-h100-x2): tensor parallelism over NCCL. Builds nothing: the
# binaries come built here (CMAKE_CUDA_ARCHITECTURES=90a) and carried with their libraries:
#   scripts/device/pack_carry.sh build build/tests/engine/cuda_engine_tests \
#     build/tests/kernels/kernel_tests build/bench/rill-tp-bench build/tools/rill-make-model
#   (device) mkdir -p /tmp/c && tar -xJf .carry/c.tar.xz -C /tmp/c &&
#            scripts/device/tp_check.sh /tmp/c/bin /tmp/c/lib
# Runs in at most 5.6 minutes (the limits add to 335 s), each step under `timeout` (a hang costs its step's limit, not the run):
# the GPU tests of the TP group (CudaTp.*: a size-1 group equals the plain runner on the fixtures,
# 2 GPUs equal 1 within rounding) with NCCL_DEBUG=WARN, the embedding kernel's vocabulary-parallel
# case, then rill-tp-bench on the Llama-3-8B shape (random bf16 weights): TP=2 first (a hang shows
# early), then the plain runner and TP=1, with the NCCL all-reduce table (8 KB .. 64 MB, eager and
# in a CUDA graph) and the all-reduce's share of the TP=2 step. RILL_TP_TRACE=1 logs each rank's
# stage and RILL_TP_WATCHDOG_S aborts a group call that does not finish (the error names the call
# and each rank's stage). Logs and the summary table go to $OUT (tp_*.txt, tp_summary.txt).
set -u
bin=$1 lib=$2
# NCCL: the toolkit's lib/ where it has one, else the nvidia-nccl-cu13 wheel's (too big to carry).
nccl_lib=$(python3 -c "import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))" 2>/dev/null)/lib
export LD_LIBRARY_PATH=$lib:$nccl_lib:/usr/local/cuda/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
# NVLink multicast stays off on these machines (the device notes require it; Rill sets it too).
export NCCL_NVLS_ENABLE=0
export RILL_SOURCE_DIR=$PWD
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm --format=csv,noheader
nvidia-smi topo -m 2>/dev/null | head -4
run() {  # run NAME TIMEOUT_S CMD...
  local name=$1 tmo=$2
  shift 2
  echo "=== [$name] $* ($(date +%T))"
  local t=$SECONDS
  timeout "$tmo" "$@" >"$OUT/tp_$name.txt" 2>&1
  echo "=== rc=$? took $((SECONDS - t)) s"
  tail -n "${TAIL:-20}" "$OUT/tp_$name.txt"
}
export NCCL_DEBUG=WARN RILL_TP_TRACE=1 RILL_TP_WATCHDOG_S=60
TAIL=40 run tests 130 "$bin/cuda_engine_tests" --gtest_filter='CudaTp.*'
TAIL=6 run kernel 30 "$bin/kernel_tests" --gtest_filter='Embedding.*' --gtest_brief=1
[ -d /tmp/llama3-8b ] || run make8b 50 "$bin/rill-make-model" --config llama3-8b --out /tmp/llama3-8b
TAIL=40 run bench_tp2 70 "$bin/rill-tp-bench" --model /tmp/llama3-8b --tp 2 --context 512 --steps 64
TAIL=12 run bench 55 "$bin/rill-tp-bench" --model /tmp/llama3-8b --tp 0,1 --context 512 --steps 64 \
  --no-allreduce
{
  echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x $(nvidia-smi -L | wc -l)"
  grep -aE "^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED  \]|OK \]" "$OUT/tp_tests.txt" | head -12
  grep -aA14 "^NCCL" "$OUT/tp_bench_tp2.txt"
  grep -aA6 "^batch-1 decode" "$OUT/tp_bench_tp2.txt" "$OUT/tp_bench.txt"
  grep -ah "tensor parallel.*abort\|did not finish" "$OUT"/tp_*.txt | head -6
} | tee "$OUT/tp_summary.txt"
