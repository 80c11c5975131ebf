#!/usr/bin/env bash
# Builds the CUDA engine, tools, benchmarks and GPU tests on the GPU machine itself (16 cores:
# about 5 minutes; the build folder build-device/ stays while the machine is warm), and links the
# binaries gpu_check.sh runs into build-device/bin:
#   scripts/device/build_here.sh && scripts/device/gpu_check.sh build-device/bin /tmp SECTION...
# rill-server needs gRPC, which that machine lacks: build it here instead and carry it.
set -euo pipefail
export PATH=/usr/local/cuda/bin:$PATH
cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a >/dev/null
targets=(rill-bench rill-serve-bench rill-session-bench rill-make-model rill-ppl rill-run rill-logprobs-bench
  rill-gemv-fp8-bench rill-quant-check rill-tp-bench kernel_tests cuda_engine_tests)
cmake --build build-device -j "$(nproc)" --target "${targets[@]}" "$@"
mkdir -p build-device/bin
for t in "${targets[@]}"; do
  ln -sf "$(find "$PWD/build-device" -name "$t" -type f -perm -u+x | head -1)" "build-device/bin/$t"
done
ls build-device/bin
