#!/usr/bin/env bash
# Fuzzing (docs/fuzzing.md): the libFuzzer harnesses of tests/fuzz, built with clang, ASan and
# UBSan into build-fuzz/ (CPU engine only), each run for a bounded time from its seed corpus.
# Any crash, leak, sanitizer report, timeout or out-of-memory fails the run; the input that
# caused it is kept under build-fuzz/fuzz/<harness>/ and its report is printed.
#
#   scripts/test_fuzz.sh                    every harness, RILL_FUZZ_SECONDS (60) each
#   RILL_FUZZ_SECONDS=3600 scripts/test_fuzz.sh jinja tokenizer   two harnesses, an hour each
#
# Harnesses run RILL_FUZZ_JOBS (default: the number of cores) at a time, one core each. The
# corpus each grows is kept in build-fuzz/fuzz/<harness>/corpus, so a later run goes on from it.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${RILL_FUZZ_SECONDS:-60}"
jobs="${RILL_FUZZ_JOBS:-$(nproc)}"
all=(http_request openai_request grpc_request jinja tokenizer model_config safetensors grammar toolcall)
harnesses=("$@")
[ ${#harnesses[@]} -gt 0 ] || harnesses=("${all[@]}")
for h in "${harnesses[@]}"; do
  [[ " ${all[*]} " == *" $h "* ]] || { echo "rill: unknown harness '$h' (one of: ${all[*]})" >&2; exit 2; }
done

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
  -DRILL_ENABLE_CUDA=OFF -DRILL_BUILD_BENCH=OFF -DRILL_BUILD_TESTS=OFF -DRILL_BUILD_FUZZERS=ON \
  "${launcher[@]}" >/dev/null
cmake --build build-fuzz -j "$(nproc)" --target fuzzers

# Every sanitizer report is fatal (halt_on_error; UBSan is built without recovery too).
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:abort_on_error=1:detect_stack_use_after_return=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"

# Extra seeds copied into a harness's working corpus: the model data the project ships.
extra_seeds() {
  case "$1" in
    jinja) echo tests/fixtures/chat_templates/*.jinja models/rill-shakespeare/chat_template.jinja ;;
    model_config) echo models/rill-shakespeare/config.json tests/fixtures/*/config.json ;;
  esac
}
dictionary() {
  case "$1" in
    http_request) echo tests/fuzz/dict/http.dict ;;
    openai_request | model_config | grammar) echo tests/fuzz/dict/json.dict ;;
    toolcall) echo tests/fuzz/dict/toolcall.dict ;;
    jinja) echo tests/fuzz/dict/jinja.dict ;;
    tokenizer) echo tests/fuzz/dict/tokenizer.dict ;;
    safetensors) echo tests/fuzz/dict/safetensors.dict ;;
  esac  # grpc_request: binary protobuf, no dictionary
}
max_len() {
  case "$1" in
    http_request) echo 8192 ;;  # beyond the fixture's 4 KiB body limit: 413 too
    jinja) echo 16384 ;;        # the largest fixture template is 13 KB
    *) echo 4096 ;;
  esac
}

# One harness; its exit status goes to build-fuzz/fuzz/<harness>/status, its output to log.
run_one() {
  set +e
  local h="$1" dir="build-fuzz/fuzz/$1" seed dict
  mkdir -p "$dir/corpus"
  for seed in $(extra_seeds "$h"); do
    [ -f "$seed" ] && cp "$seed" "$dir/corpus/$(echo "$seed" | tr / _)"
  done
  local args=(-max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 -max_len="$(max_len "$h")"
    -artifact_prefix="$dir/" -print_final_stats=1)
  dict="$(dictionary "$h")"
  [ -z "$dict" ] || args+=(-dict="$dict")
  "build-fuzz/tests/fuzz/${h}_fuzzer" "${args[@]}" "$dir/corpus" "tests/fuzz/corpus/$h" \
    >"$dir/log" 2>&1
  echo $? >"$dir/status"
}

start=$(date +%s)
for h in "${harnesses[@]}"; do
  rm -f "build-fuzz/fuzz/$h/status" "build-fuzz/fuzz/$h"/{crash,leak,timeout,oom,slow-unit}-*
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  echo "rill: fuzzing $h for ${seconds}s"
  run_one "$h" &
done
wait

failed=0
for h in "${harnesses[@]}"; do
  dir="build-fuzz/fuzz/$h"
  status="$(cat "$dir/status" 2>/dev/null || echo missing)"
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log" 2>/dev/null | tail -1)"
  corpus="$(find "$dir/corpus" -type f 2>/dev/null | wc -l)"
  if [ "$status" = 0 ]; then
    echo "rill: fuzz $h: ok (${execs:-?} runs, corpus of $corpus inputs)"
    continue
  fi
  failed=1
  echo "rill: fuzz $h: FAILED (exit $status); the end of $dir/log:"
  tail -n 60 "$dir/log" 2>/dev/null || true
  for artifact in "$dir"/{crash,leak,timeout,oom}-*; do
    [ -e "$artifact" ] || continue
    echo "rill: the input, kept as $artifact (replay: build-fuzz/tests/fuzz/${h}_fuzzer $artifact):"
    od -A x -t x1z -v "$artifact" | head -n 20
  done
done
echo "rill: fuzzing took $(($(date +%s) - start)) s"
exit "$failed"
