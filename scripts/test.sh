#!/usr/bin/env bash
# The whole test suite on a fresh machine: install what is missing, build, run every test.
# GPU tests skip (visibly) where no GPU exists; run them on a GPU machine before a change lands.
# Each stage prints its wall time ("rill: stage ... took N s") so a slow CI run shows where.
set -euo pipefail
cd "$(dirname "$0")/.."
stage() {
  local name=$1 start=$SECONDS
  shift
  echo "rill: stage $name"
  "$@"
  echo "rill: stage $name took $((SECONDS - start)) s (suite $SECONDS s)"
}
stage deps scripts/install_deps.sh
# The scheduler under ThreadSanitizer first (CPU engine only; a second, instrumented build).
stage tsan scripts/test_tsan.sh
stage build scripts/build.sh
stage ctest ctest --test-dir build --output-on-failure -j "$(nproc)" --timeout 1200
# The parsers fuzzed for a bounded time each, then the server's end-to-end tests against a
# rill-server built with ASan + UBSan (docs/fuzzing.md; clang builds in build-fuzz/, build-asan/).
stage fuzz scripts/test_fuzz.sh
stage asan scripts/test_asan.sh
