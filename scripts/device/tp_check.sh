#!/usr/bin/env bash
# Issue 32 on a multi-GPU machine (nvidia-h100-x2 or -x4): tensor parallelism over NCCL. Builds nothing: the
# binaries come built here (CMAKE_CUDA_ARCHITECTURES=90a) and carried with their libraries:
#   scripts/device/pack_carry.sh build build/tests/engine/cuda_engine_tests \
#     build/tests/kernels/kernel_tests build/bench/rill-tp-bench build/tools/rill-make-model
#   (device) mkdir -p /tmp/c && tar -xJf .carry/c.tar.xz -C /tmp/c &&
#            scripts/device/tp_check.sh /tmp/c/bin /tmp/c/lib [SECTION...]
# Sections (default: tests 8b): tests, 8b (TP=2 against TP=1 and the plain runner on the 8B shape),
# 8b-shapes (TP=2 with the GEMVs' CTA shapes varied),
# 8b-tp4, make70b (writes the Llama-3-70B shape, 141 GB, to /tmp; `&` it behind the tests),
# 70b (TP=4 batch-1 TPOT, target <= 14.5 ms), serve70b (1,000 x 256/256 at TP=4 with rill-serve-bench),
# serve8b (the same workload on the 8B shape at TP=2), summary. Add rill-serve-bench to the carry for
# the serve sections.
# The default sections run in at most 5.6 minutes (the limits add to 335 s), each step under `timeout` (a hang costs its step's limit, not the run):
# the GPU tests of the TP group (CudaTp.*: a size-1 group equals the plain runner on the fixtures,
# 2 GPUs equal 1 within rounding) with NCCL_DEBUG=WARN, the embedding kernel's vocabulary-parallel
# case and the peer-memory all-reduce (PeerSum.*), then rill-tp-bench on the Llama-3-8B shape
# (random bf16 weights): TP=2 first (a hang shows early), then the plain runner and TP=1, with the
# NCCL all-reduce table (8 KB .. 64 MB, eager and in a CUDA graph), the crossover of the fused
# peer-memory all-reduce against NCCL + add_norm, and TP=2 with NCCL only and with the default. RILL_TP_TRACE=1 logs each rank's
# stage and RILL_TP_WATCHDOG_S aborts a group call that does not finish (the error names the call
# and each rank's stage). Logs and the summary table go to $OUT (tp_*.txt, tp_summary.txt).
set -u
bin=$1 lib=$2
shift 2
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
make8b() { [ -f /tmp/llama3-8b/config.json ] || run make8b 80 "$bin/rill-make-model" --config llama3-8b --out /tmp/llama3-8b; }
wait70b() {  # the 70B checkpoint, written by a make70b section started in the background
  while [ ! -f /tmp/llama3-70b.done ] && pgrep -f "rill-make-model --config llama3-70b" >/dev/null; do sleep 2; done
  [ -f /tmp/llama3-70b.done ] || { echo "no 70B checkpoint (run the make70b section first)"; return 1; }
}
serve() {  # serve NAME TIMEOUT_S MODEL TP: offline throughput of 1,000 requests of 256 + 256 tokens
  local name=$1 tmo=$2 model=$3 tp=$4
  TAIL=14 run "$name" "$tmo" "$bin/rill-serve-bench" --model "$model" --dtype bfloat16 --tensor-parallel-size "$tp" \
    --num-requests 1000 --input-len 256 --output-len 256 --max-num-seqs 256 --max-num-batched-tokens 8192 --measure-decode
}
sections=("$@")
[ ${#sections[@]} -gt 0 ] || sections=(tests 8b summary)
for s in "${sections[@]}"; do
  case $s in
    tests)
      TAIL=40 run tests 130 "$bin/cuda_engine_tests" --gtest_filter='CudaTp.*'
      TAIL=8 run kernel 60 "$bin/kernel_tests" --gtest_filter='Embedding.*:AddNorm.*:PeerSum.*' --gtest_brief=1 ;;
    8b)
      make8b
      TAIL=40 run bench_tp2 150 "$bin/rill-tp-bench" --model /tmp/llama3-8b --tp 2 --context 512 --steps 64 --world 2
      TAIL=12 run bench 55 "$bin/rill-tp-bench" --model /tmp/llama3-8b --tp 0,1 --context 512 --steps 64 \
        --no-allreduce ;;
    8b-shapes)  # TP=2 with single GEMVs forced to other CTA shapes (SHAPES: rill-tp-bench's syntax)
      make8b
      TAIL=30 run bench_shapes 300 "$bin/rill-tp-bench" --model /tmp/llama3-8b --tp 2 --context 512 --steps 64 \
        --no-allreduce --projection-gemv-configs "${SHAPES:-2:7,2:5,2:12,1:7,1:8,4:9,4:7,8:10,8:7,16:10}" ;;
    8b-tp4)
      make8b
      TAIL=12 run bench_8b_tp4 70 "$bin/rill-tp-bench" --model /tmp/llama3-8b --tp 4 --context 512 --steps 64 \
        --no-allreduce ;;
    make70b)
      rm -f /tmp/llama3-70b.done
      run make70b 400 "$bin/rill-make-model" --config llama3-70b --out /tmp/llama3-70b && touch /tmp/llama3-70b.done
      df -h /tmp | tail -1 ;;
    70b)
      wait70b && TAIL=16 run bench_70b 240 "$bin/rill-tp-bench" --model /tmp/llama3-70b --tp 4 --context 512 \
        --steps 64 --world 4 ;;
    serve70b) wait70b && serve serve70b 420 /tmp/llama3-70b 4 ;;
    serve8b) make8b && serve serve8b 300 /tmp/llama3-8b 2 ;;
    summary)
      {
        echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x $(nvidia-smi -L | wc -l)"
        grep -saE "^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED  \]|OK \]" "$OUT/tp_tests.txt" | head -12
        grep -saA14 "^NCCL" "$OUT/tp_bench_tp2.txt" "$OUT/tp_bench_70b.txt"
        grep -saA12 "^all-reduce + residual" "$OUT/tp_bench_tp2.txt" "$OUT/tp_bench_70b.txt"
        grep -saA7 "^batch-1 decode" "$OUT"/tp_bench*.txt
        grep -sah "output tok/s\|TPOT\|TTFT" "$OUT/tp_serve70b.txt" "$OUT/tp_serve8b.txt" | head -12
        grep -sah "tensor parallel.*abort\|did not finish" "$OUT"/tp_*.txt | head -6
      } | tee "$OUT/tp_summary.txt" ;;
    *) echo "unknown section $s"; exit 2 ;;
  esac
done
