#!/usr/bin/env bash
# GPU checks with binaries built elsewhere (CMAKE_CUDA_ARCHITECTURES=90a) and carried along:
#   scripts/device/gpu_check.sh BIN_DIR LIB_DIR SECTION...
# Sections: tests (kernel + CUDA engine tests), ppl (rill-ppl against the golden rows present),
# bench-small (default model), micro (kernel benchmarks), bench-7b / bench-8b (Llama-2-7B and
# Llama-3-8B shapes from rill-make-model), bench-7b-quick / bench-8b-quick (batch 1 with each
# optimisation off in turn), bench-7b-streaming, long-small / long-7b (long StreamingLLM runs).
# sessions-7b / sessions-offload-7b drive multi-turn sessions (rill-session-bench, docs/streaming.md).
# serve-7b / serve-8b / serve-mix-7b drive the serving engine (rill-serve-bench): 64 decode
# streams of the 7B shape against rill-bench's pipelined step; 1,000 requests of 256 + 256
# tokens on the 8B shape; 32 decode streams while 2,048-token prompts arrive.
# bench-7b and bench-8b end with a kernel timeline of the batch-1 step (rill-bench --trace).
# fp8 weights (issue 28): fp8-tests (kernel and CUDA engine tests of the fp8 paths), fp8-micro
# (rill-gemv-fp8-bench), fp8-7b / fp8-8b (decode, prefill, GEMV/GEMM switch, logit cosine against
# 16-bit, and on the 8B shape 1,000 requests of 256 + 256), fp8-ppl (default model, --quantization
# fp8 against none); `fp8` runs them all and ends with a short summary. fp8-fast-accum compares
# the W8A8 GEMMs with and without cuBLASLt's fast accumulation (CudaTuning::fp8_fast_accum): its
# tests, the GEMMs alone (rill-gemm-fp8-bench), the 7B's 2,048-token prefill against bf16 in the
# same session, and the 7B logit cosine both ways. fp8-prefill: the 7B's 2,048-token prefill, fp8
# against bf16, three rounds. fp8-persistent: decode at 1-16 tokens with the fp8 GEMVs' persistent
# ring (the default) against the ring of 4 it replaced.
# Logs go to $OUT/gpu_<section>.txt.
set -u
bin=$1 lib=$2
shift 2
export LD_LIBRARY_PATH=$lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export RILL_SOURCE_DIR=$PWD
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,clocks.mem --format=csv,noheader
run() {  # run SECTION TIMEOUT_S CMD...
  local sec=$1 tmo=$2
  shift 2
  echo "=== [$sec] $* ($(date +%T))"
  local t=$SECONDS
  timeout "$tmo" "$@" >>"$OUT/gpu_$sec.txt" 2>&1
  echo "=== rc=$? took $((SECONDS - t)) s"
  tail -n "${TAIL:-25}" "$OUT/gpu_$sec.txt"
}
make7b() { [ -d /tmp/llama2-7b ] || run make7b 150 "$bin/rill-make-model" --config llama2-7b --out /tmp/llama2-7b; }
make8b() { [ -d /tmp/llama3-8b ] || run make8b 150 "$bin/rill-make-model" --config llama3-8b --out /tmp/llama3-8b; }
fp8_summary() {  # the lines that hold the fp8 figures, from the fp8 sections' logs
  echo "=== fp8 summary"
  for f in "$OUT"/gpu_fp8*.txt; do
    [ -f "$f" ] || continue
    echo "--- $(basename "$f")"
    grep -aE "PASSED|FAILED|relative L2 error of logits|^(qkv|o|gate_up|down|l3_[a-z]+) |layers of fp8|^  (default|[0-9]+w x)|linear layers|^ +(1|8|16|32|64|128) +[0-9]+ |^ +2048 |cosine|^(full|window|recompute|streaming) |tolerance|output [0-9.]+ tok/s|decode window|TPOT" "$f" | cut -c1-220
  done
}
sections=("$@")
if [ "${sections[0]:-}" = fp8 ]; then sections=(fp8-tests fp8-micro fp8-ppl fp8-7b fp8-8b fp8-summary); fi
for section in "${sections[@]}"; do
  case $section in
    fp8-tests)
      TAIL=12 run fp8_tests 300 "$bin/kernel_tests" --gtest_filter='GemvFp8*:QuantizeFp8*' --gtest_brief=1
      TAIL=25 run fp8_tests 400 "$bin/cuda_engine_tests" --gtest_filter='*Fp8*' ;;
    fp8-micro)
      TAIL=50 run fp8_micro 240 "$bin/rill-gemv-fp8-bench" ;;
    fp8-ppl)  # --quantization fp8 on the default model: perplexity within 2% of bf16
      for q in none fp8; do
        TAIL=8 run fp8_ppl 200 "$bin/rill-ppl" --model models/rill-shakespeare --device cuda --quantization $q \
          --golden tests/golden/streaming_default.json --tolerance 0.02
      done ;;
    fp8-7b)  # batch-1 TPOT @ 515 and 2,048-token prefill, fp8 against the 16-bit run in the same session
      make7b
      TAIL=14 run fp8_7b 300 "$bin/rill-bench" --model /tmp/llama2-7b --quantization fp8 --batch 1,8,16,32,64 \
        --context 512 --prefill 2048 --max-batch 64 --steps 64
      TAIL=6 run fp8_7b 200 "$bin/rill-bench" --model /tmp/llama2-7b --quantization fp8 --fp8-gemv-max-rows 0 \
        --batch 8,16 --context 512 --prefill 0 --max-batch 64 --steps 64
      TAIL=8 run fp8_7b 200 "$bin/rill-bench" --model /tmp/llama2-7b --quantization none --batch 1 --context 512 \
        --prefill 2048 --max-batch 64 --steps 64
      TAIL=4 run fp8_7b 200 "$bin/rill-quant-check" --model /tmp/llama2-7b --device cuda --positions 256 ;;
    fp8-8b)  # batch 1 @ 515, batch 128, logit cosine, and 1,000 requests of 256 + 256 all at once
      make8b
      TAIL=8 run fp8_8b 300 "$bin/rill-bench" --model /tmp/llama3-8b --quantization fp8 --batch 1,128 \
        --context 512 --prefill 0 --max-batch 128 --steps 64
      TAIL=4 run fp8_8b 200 "$bin/rill-quant-check" --model /tmp/llama3-8b --device cuda --positions 256
      TAIL=12 run fp8_8b 400 "$bin/rill-serve-bench" --model /tmp/llama3-8b --quantization fp8 --num-requests 1000 \
        --input-len 256 --output-len 256 --max-num-seqs 256 --max-num-batched-tokens 8192 --measure-decode ;;
    fp8-fast-accum)
      TAIL=20 run fp8_fast 300 "$bin/cuda_engine_tests" \
        --gtest_filter='CudaFp8Gemm.*:CudaFp8.BothAccumulationModes*:CudaFp8.DefaultModel*'
      TAIL=24 run fp8_fast 240 "$bin/rill-gemm-fp8-bench" --m 256,2048 --algos 1 --iters 10
      make7b
      for f in 0 1; do
        TAIL=4 run fp8_fast 200 "$bin/rill-bench" --model /tmp/llama2-7b --quantization fp8 --fp8-fast-accum $f \
          --batch 1 --context 512 --prefill 2048 --steps 16
      done
      TAIL=4 run fp8_fast 200 "$bin/rill-bench" --model /tmp/llama2-7b --quantization none --batch 1 \
        --context 512 --prefill 2048 --steps 16
      for f in 0 1; do
        TAIL=4 run fp8_fast 200 "$bin/rill-quant-check" --model /tmp/llama2-7b --device cuda --positions 256 \
          --fp8-fast-accum $f
      done ;;
    fp8-prefill)  # the 7B's 2,048-token prefill, fp8 (the default: fast accumulation), bf16 and fp8
      # with promoted accumulation, three rounds alternating; each round's ratio bf16 / fp8
      make7b
      for i in 1 2 3; do
        for q in "fp8" "none" "fp8 --fp8-fast-accum 0"; do
          # shellcheck disable=SC2086  # $q is a flag list
          ms=$("$bin/rill-bench" --model /tmp/llama2-7b --quantization $q --batch 1 --context 512 \
            --prefill 2048 --steps 8 2>&1 | awk '$1 == 2048 {print $2}')
          echo "round $i --quantization $q: ${ms:-?} ms" | tee -a "$OUT/gpu_fp8_prefill.txt"
        done
      done
      awk '/quantization fp8:/ {f = $(NF - 1) + 0} /quantization none:/ {b = $(NF - 1) + 0}
           /fast-accum 0:/ {p = $(NF - 1) + 0
             if (f > 0 && b > 0 && p > 0) printf "round %s: bf16 / fp8 %.3fx (promoted accumulation %.3fx)\n", $2, b / f, b / p
             else printf "round %s: a run printed no time\n", $2}' \
        "$OUT/gpu_fp8_prefill.txt" | tee -a "$OUT/gpu_fp8_prefill.txt" ;;
    fp8-persistent)  # the fp8 decode GEMVs' persistent ring of 3 (the default) against the
      # ring of 4 it replaced (config 6) at 1-8 tokens in the same process, at 16 tokens in two,
      # then the 7B's batch-1 timeline
      make7b
      make8b
      for m in llama2-7b llama3-8b; do
        TAIL=12 run fp8_persistent 200 "$bin/rill-bench" --model /tmp/$m --quantization fp8 --batch 1,2,4,8 \
          --context 512 --prefill 0 --max-batch 16 --fp8-projection-gemv-configs "1:6+2:6+4:6+8:6"
        for c in -1 6; do
          TAIL=3 run fp8_persistent 120 "$bin/rill-bench" --model /tmp/$m --quantization fp8 --batch 16 \
            --context 512 --prefill 0 --max-batch 16 --fp8-gemv-deep-config $c
        done
      done
      TAIL=16 run fp8_persistent 120 "$bin/rill-bench" --model /tmp/llama2-7b --quantization fp8 --batch 1 \
        --context 512 --prefill 0 --trace ;;
    fp8-summary)
      fp8_summary ;;
    tests)
      TAIL=15 run tests 300 "$bin/kernel_tests" --gtest_brief=1
      TAIL=15 run tests 300 "$bin/cuda_engine_tests" --gtest_brief=1 ;;
    logprobs)
      TAIL=20 run logprobs 60 "$bin/rill-logprobs-bench" ;;
    bench-7b-b1)  # the headline: Llama-2-7B decode at batch 1, 512 cached tokens
      [ -d /tmp/llama2-7b ] || run make7b 120 "$bin/rill-make-model" --config llama2-7b --out /tmp/llama2-7b
      TAIL=8 run bench_7b_b1 200 "$bin/rill-bench" --model /tmp/llama2-7b --batch 1 --context 512 --prefill 0 \
        --max-batch 8 --steps 128 ;;
    ppl)
      for g in tests/golden/streaming_default.json tests/golden/streaming_gpu_part.json; do
        [ -f "$g" ] && { run ppl 200 "$bin/rill-ppl" --model models/rill-shakespeare --device cuda --golden "$g"; break; }
      done ;;
    bench-small)
      run bench_small 200 "$bin/rill-bench" --model models/rill-shakespeare --batch 1,16,64 --context 256,512 \
        --prefill 512 --graphs-off-too --breakdown --max-batch 64 --max-step-tokens 4096 ;;
    micro)
      TAIL=40 run micro 120 "$bin/rill-gemv-bench"
      TAIL=30 run micro 120 "$bin/rill-attention-bench"
      TAIL=20 run micro 60 "$bin/rill-sampling-bench"
      [ -x "$bin/rill-logprobs-bench" ] && TAIL=20 run micro 60 "$bin/rill-logprobs-bench" ;;
    bench-7b)
      run make7b 120 "$bin/rill-make-model" --config llama2-7b --out /tmp/llama2-7b
      TAIL=40 run bench_7b 300 "$bin/rill-bench" --model /tmp/llama2-7b --batch 1,64 --context 512,1024 \
        --prefill 2048 --graphs-off-too --gemv-off-too --pdl-off-too --fusion-off-too --early-kv-off-too --cluster-off-too --gemv-deep-masks 0 --breakdown --max-batch 64 --max-step-tokens 8192
      TAIL=40 run trace_7b 200 "$bin/rill-bench" --model /tmp/llama2-7b --batch 1 --context 512 --prefill 0 --max-batch 8 --trace ;;
    bench-7b-quick)  # batch-1 TPOT with each optimisation switched off in turn, and the breakdown
      [ -d /tmp/llama2-7b ] || run make7b 120 "$bin/rill-make-model" --config llama2-7b --out /tmp/llama2-7b
      TAIL=30 run bench_7b_quick 200 "$bin/rill-bench" --model /tmp/llama2-7b --batch 1 --context 512 \
        --prefill 0 --graphs-off-too --gemv-off-too --pdl-off-too --fusion-off-too --early-kv-off-too --cluster-off-too --breakdown --max-batch 8 --steps 64 ;;
    bench-8b-quick)
      [ -d /tmp/llama3-8b ] || run make8b 120 "$bin/rill-make-model" --config llama3-8b --out /tmp/llama3-8b
      TAIL=20 run bench_8b_quick 200 "$bin/rill-bench" --model /tmp/llama3-8b --batch 1 --context 512 \
        --prefill 0 --gemv-off-too --pdl-off-too --fusion-off-too --early-kv-off-too --cluster-off-too --max-batch 8 --steps 64 ;;
    long-7b)
      [ -d /tmp/llama2-7b ] || run make7b 120 "$bin/rill-make-model" --config llama2-7b --out /tmp/llama2-7b
      TAIL=30 run long_7b 420 "$bin/rill-bench" --model /tmp/llama2-7b --cache streaming --sink 4 \
        --window 1020 --long-stream "${LONG_TOKENS:-50000}" --max-batch 8 ;;
    bench-7b-streaming)  # 4 + 252 against 4 + 4092, fp16 and fp8 KV caches
      [ -d /tmp/llama2-7b ] || run make7b 120 "$bin/rill-make-model" --config llama2-7b --out /tmp/llama2-7b
      for kv in auto fp8; do
        for w in 252 4092; do
          TAIL=6 run bench_7b_streaming 200 "$bin/rill-bench" --model /tmp/llama2-7b --batch 1 --context $((w + 4)) \
            --prefill 0 --cache streaming --sink 4 --window $w --max-batch 8 --steps 64 --kv-cache-dtype $kv
        done
      done ;;
    serve-7b)  # loop step of 64 decode streams (context 512 -> 1024) vs rill-bench piped at 768
      [ -d /tmp/llama2-7b ] || run make7b 120 "$bin/rill-make-model" --config llama2-7b --out /tmp/llama2-7b
      TAIL=12 run serve_7b 300 "$bin/rill-serve-bench" --model /tmp/llama2-7b --num-requests 64 --input-len 512 \
        --output-len 512 --max-num-seqs 64 --max-num-batched-tokens 8192 --measure-decode
      TAIL=12 run serve_7b 200 "$bin/rill-bench" --model /tmp/llama2-7b --batch 64 --context 768 --prefill 0 \
        --max-batch 64 --max-step-tokens 8192 ;;
    serve-8b)  # offline throughput: 1,000 requests of 256 prompt + 256 output tokens, bf16
      [ -d /tmp/llama3-8b ] || run make8b 120 "$bin/rill-make-model" --config llama3-8b --out /tmp/llama3-8b
      TAIL=12 run serve_8b 400 "$bin/rill-serve-bench" --model /tmp/llama3-8b --dtype bfloat16 --num-requests 1000 \
        --input-len 256 --output-len 256 --max-num-seqs 256 --max-num-batched-tokens 8192 --measure-decode ;;
    serve-mix-7b)  # 32 decode streams (4 + 1020 StreamingLLM caches, full from the start, so their
      # steady TPOT does not drift with context); 2,048-token prompts arrive at 2/s, 192-token chunks
      [ -d /tmp/llama2-7b ] || run make7b 120 "$bin/rill-make-model" --config llama2-7b --out /tmp/llama2-7b
      TAIL=16 run serve_mix_7b 300 "$bin/rill-serve-bench" --model /tmp/llama2-7b --decode-streams 32 \
        --decode-prompt-len 1024 --decode-window 1020 --num-requests 16 --input-len 2048 --output-len 32 \
        --rate 2 --max-num-seqs 64 --max-num-batched-tokens 224 ;;
    sessions-7b)  # issue 23: a 1,000-turn session (4 + 1020 cache, 80 + 20 tokens a turn) against the
      # same conversation re-sent whole each turn (full cache) until the context is full, without
      # prefix caching (S6's baseline: the history recomputed each turn; prefix_cache_check.sh
      # measures re-sent histories with the cache)
      [ -d /tmp/llama2-7b ] || run make7b 120 "$bin/rill-make-model" --config llama2-7b --out /tmp/llama2-7b
      TAIL=8 run sessions_7b 420 "$bin/rill-session-bench" --model /tmp/llama2-7b --device cuda --mode conversation \
        --turns 1000 --turn-len 80 --answer-len 20 --sink 4 --window 1020 --no-prefix-caching \
        --json "$OUT/sessions_7b.json" ;;
    sessions-offload-7b)  # 100 sessions (512-token first turns), idle caches mostly in host memory, 16
      # streams running; then every session's second turn restores its cache
      [ -d /tmp/llama2-7b ] || run make7b 120 "$bin/rill-make-model" --config llama2-7b --out /tmp/llama2-7b
      TAIL=8 run sessions_offload_7b 420 "$bin/rill-session-bench" --model /tmp/llama2-7b --device cuda \
        --mode offload --sessions 100 --first-len 512 --turn-len 64 --answer-len 16 --concurrency 8 --streams 16 \
        --stream-window 1020 --sink 4 --window 1020 --session-gpu-fraction 0.1 --host-kv-cache-bytes 25769803776 \
        --json "$OUT/sessions_offload_7b.json" ;;
    long-small)
      TAIL=12 run long_small 240 "$bin/rill-bench" --model models/rill-shakespeare --cache streaming --sink 4 \
        --window 252 --long-stream "${LONG_TOKENS:-100000}" --max-batch 8 ;;
    bench-8b)
      run make8b 120 "$bin/rill-make-model" --config llama3-8b --out /tmp/llama3-8b
      TAIL=20 run bench_8b 300 "$bin/rill-bench" --model /tmp/llama3-8b --batch 1,128 --context 128,512 --prefill 0 \
        --gemv-off-too --pdl-off-too --fusion-off-too --early-kv-off-too --cluster-off-too --gemv-deep-masks 0 --max-batch 128 --max-step-tokens 8192
      TAIL=40 run trace_8b 200 "$bin/rill-bench" --model /tmp/llama3-8b --batch 1 --context 128 --prefill 0 --max-batch 8 --trace ;;
  esac
done
exit 0
