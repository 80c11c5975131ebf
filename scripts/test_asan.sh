#!/usr/bin/env bash
# The server's end-to-end tests (ctest label `server`: tests/server, real clients on real
# sockets) against a rill-server built with clang's AddressSanitizer and UndefinedBehaviorSanitizer
# into build-asan/ (CPU engine only). Every sanitizer report fails the run: memory errors,
# undefined behaviour and LeakSanitizer's leak report when a server exits. Reports go to
# build-asan/sanitizer/ (the tests' servers are many processes), which is printed and checked
# after the tests. tests/fuzz/lsan.supp suppresses only leaks inside gRPC's and protobuf's own
# libraries (docs/fuzzing.md says which and why).
set -euo pipefail
cd "$(dirname "$0")/.."
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
flags="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
  -DRILL_ENABLE_CUDA=OFF -DRILL_BUILD_BENCH=OFF "-DCMAKE_CXX_FLAGS=$flags" \
  "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=address,undefined" "${launcher[@]}" >/dev/null
cmake --build build-asan -j "$(nproc)" --target rill-server rill_sampling_fields_dump

reports="$PWD/build-asan/sanitizer"
rm -rf "$reports"
mkdir -p "$reports"
# The tests' servers inherit these; the clients (python3, node) are not instrumented and ignore
# them. A leak is reported when a server exits (SIGTERM: drain, then return from main).
# quarantine_size_mb: freed memory ASan holds back to catch use-after-free counts in the server's
# RSS; the default (256 MiB) hides what http_limits_test.py measures (the buffered-body budget).
export ASAN_OPTIONS="log_path=$reports/asan:detect_leaks=1:halt_on_error=1:detect_stack_use_after_return=1:quarantine_size_mb=16"
export UBSAN_OPTIONS="log_path=$reports/ubsan:print_stacktrace=1:halt_on_error=1"
export LSAN_OPTIONS="suppressions=$PWD/tests/fuzz/lsan.supp:print_suppressions=0"
# 100 concurrent streams, not 1,000: the sanitized server is several times slower, and the test
# checks connection handling, not throughput (1,000 queue up past the queue timeout).
export RILL_CONCURRENT_CLIENTS=100
# 40 random schemas, not 200: the same paths (compile, masks, sampling, validation) at the
# sanitized server's speed; the plain run validates all 200.
export RILL_STRUCTURED_SCHEMAS=40
# Tests that cannot run under the sanitizers skip themselves, saying why (descriptor exhaustion).
export RILL_SANITIZED=1
status=0
# The tests of rill-server (tests/server); those of the clients (label client: rill-client,
# rill-loadtest, not built here) are left to the main suite.
ctest --test-dir build-asan -L server -LE client --output-on-failure --timeout 900 || status=$?
if compgen -G "$reports/*" >/dev/null; then
  for f in "$reports"/*; do
    echo "rill: sanitizer report $f:"
    cat "$f"
  done
  echo "rill: the server tests under ASan/UBSan left sanitizer reports (above)" >&2
  exit 1
fi
exit "$status"
