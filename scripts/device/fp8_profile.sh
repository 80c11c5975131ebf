#!/usr/bin/env bash
# Where the fp8 decode step of the Llama-2-7B shape spends its time (issue 28: batch-1 TPOT 3.3 ms
# against a 2.4 ms copy limit):
#   1. each kernel's share of a decode step at batch 1, 515 cached (rill-bench --trace, CUPTI over
#      the graph replays: gpu_fp8_trace.txt);
#   2. Nsight Compute (clocks left alone: --clock-control none) on the fp8 GEMV of each
#      projection of one layer: speed of light, occupancy, warp stalls
#      (gpu_fp8_gemv_detail.txt);
# then the fp8 GEMV micro-benchmark (rill-gemv-fp8-bench: every shape and CTA shape, % of copy).
#   scripts/device/fp8_profile.sh BIN_DIR LIB_DIR
# Binaries: rill-bench, rill-gemv-fp8-bench, rill-make-model (built here for 90a, carried).
set -u
bin=$1 lib=$2
export LD_LIBRARY_PATH=$lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -d /tmp/llama2-7b ] || "$bin/rill-make-model" --config llama2-7b --out /tmp/llama2-7b >/dev/null
step=(--model /tmp/llama2-7b --quantization fp8 --batch 1 --context 512 --prefill 0)
echo "=== rill-bench --trace ($(date +%T))"
timeout 120 "$bin/rill-bench" "${step[@]}" --steps 32 --trace >"$OUT/gpu_fp8_trace.txt" 2>&1
echo "=== rc=$?"
grep -v "^\[" "$OUT/gpu_fp8_trace.txt" | tail -40
echo "=== ncu detail ($(date +%T))"
timeout 150 "$ncu" --clock-control none --kernel-name regex:gemv_fp8 --launch-skip 300 --launch-count 4 \
  --section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
  --section LaunchStats "$bin/rill-bench" "${step[@]}" --steps 8 --no-cuda-graphs >"$OUT/gpu_fp8_gemv_detail.txt" 2>&1
echo "=== rc=$?"
grep -E "gemv_fp8|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Stall|Warp Cycles Per Issued|Theoretical Occ|Block Limit" \
  "$OUT/gpu_fp8_gemv_detail.txt" | head -80
echo "=== rill-gemv-fp8-bench ($(date +%T))"
timeout 200 "$bin/rill-gemv-fp8-bench" >"$OUT/gpu_fp8_micro.txt" 2>&1
echo "=== rc=$?"
tail -60 "$OUT/gpu_fp8_micro.txt"
