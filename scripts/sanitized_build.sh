#!/usr/bin/env bash
# The sanitized clang build that scripts/test_fuzz.sh (the libFuzzer harnesses) and
# scripts/test_asan.sh (rill-server for the end-to-end tests) share: build-fuzz/, CPU engine only,
# every target with ASan, UBSan and libFuzzer's coverage (RILL_BUILD_FUZZERS, the root
# CMakeLists.txt). One tree, so the engine and the server compile once for both steps.
#   scripts/sanitized_build.sh TARGET...
set -euo pipefail
cd "$(dirname "$0")/.."
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
  -DRILL_ENABLE_CUDA=OFF -DRILL_BUILD_BENCH=OFF -DRILL_BUILD_TESTS=ON -DRILL_BUILD_FUZZERS=ON \
  "${launcher[@]}" >/dev/null
cmake --build build-fuzz -j "$(nproc)" --target "$@"
