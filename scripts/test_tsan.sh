#!/usr/bin/env bash
# The serving engine's concurrency under ThreadSanitizer: the CPU engine and the scheduler tests
# built with -fsanitize=thread into build-tsan/, then the stress test (random submits, cancels,
# dropped handles, deadlines from several threads), the cancellation / drain tests and the
# sessions' concurrency (turns on several threads, offload and restore, close while running, ids closed
# and created again while turns run, never-used sessions expiring, every session counted) and request
# ids cancelled across scopes. Any data race fails the run (halt_on_error).
set -euo pipefail
cd "$(dirname "$0")/.."
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRILL_ENABLE_CUDA=OFF -DRILL_BUILD_BENCH=OFF \
  "-DCMAKE_CXX_FLAGS=-fsanitize=thread" "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread" "${launcher[@]}" >/dev/null
cmake --build build-tsan -j "$(nproc)" --target scheduler_tests
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" build-tsan/tests/scheduler/scheduler_tests \
  --gtest_filter='ServingEngineStress.*:ServingEngine.DroppingTheHandle*:ServingEngine.DrainTimeout*:StopFilter.*:Sessions.ConcurrentTurns*:Sessions.ATurnWhile*:Sessions.Closing*:Sessions.ATurnEnds*:Sessions.NeverUsed*:Sessions.EveryLive*:Ids.ClientIds*'
