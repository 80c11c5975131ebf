#!/usr/bin/env bash
# GPU check of CudaTuning::precapture_graphs (--precapture-graphs, issue 31): the CUDA tests of
# graph replay, then start-up time and the first request's latency with the graphs captured at
# start-up against captured on first use, on the default model and on the Llama-2-7B shape.
#   scripts/device/build_here.sh && scripts/device/precapture_check.sh build-device/bin
# Prints each run's "captured N decode graphs (batch x splits: ...) in X ms" line, its wall time
# and the first-token time of rill-run (default model) and the decode figures of rill-bench (7B).
set -u
bin=${1:-build-device/bin}
export RILL_SOURCE_DIR=$PWD
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
"$bin/cuda_engine_tests" --gtest_filter='CudaRunner.PrecapturedGraphsGiveTheEagerTokens:CudaRunner.MixedStepsAndGraphsGiveTheSameTokens:CudaRunner.LaunchModesChangeNoBit:CudaRunner.SetTuningEqualsConstructionAndValidates:CudaRunner.DecodeSplitsChangeOnlyRounding' 2>&1 | tail -n 15
[ -d /tmp/llama2-7b ] || "$bin/rill-make-model" --config llama2-7b --out /tmp/llama2-7b >/dev/null
ms_since() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
for flag in --no-precapture-graphs --precapture-graphs; do
  t=$(date +%s%N)
  out=$("$bin/rill-run" --model models/rill-shakespeare --device cuda --prompt "ROMEO:" \
    --max-tokens 64 --seed 7 $flag 2>&1)
  echo "=== rill-run, default model, $flag: $(ms_since "$t") ms wall"
  echo "$out" | grep -aE "captured|cuda runner:|time to first token" | cut -c1-300
  # The 7B shape (random weights, no tokenizer): rill-bench's batch-1 decode.
  t=$(date +%s%N)
  out=$("$bin/rill-bench" --model /tmp/llama2-7b --batch 1,64 --context 512 --prefill 0 $flag 2>&1)
  echo "=== rill-bench, Llama-2-7B shape, $flag: $(ms_since "$t") ms wall"
  echo "$out" | grep -aE "captured|cuda runner:" | cut -c1-300
  echo "$out" | tail -n 6
done
