#!/usr/bin/env bash
# The whole test suite on a fresh machine: install what is missing, build, run every test.
# GPU tests skip (visibly) where no GPU exists; run them on a GPU machine before a change lands.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
# The scheduler under ThreadSanitizer first (CPU engine only; a second, instrumented build).
scripts/test_tsan.sh
scripts/build.sh
ctest --test-dir build --output-on-failure -j "$(nproc)" --timeout 1200
# The parsers fuzzed for a bounded time each, then the server's end-to-end tests against a
# rill-server built with ASan + UBSan (docs/fuzzing.md; clang builds in build-fuzz/, build-asan/).
scripts/test_fuzz.sh
scripts/test_asan.sh
