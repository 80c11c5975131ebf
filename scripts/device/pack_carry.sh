#!/usr/bin/env bash
# Packs the GPU-side binaries of a 90a build for the device machine (configure it with
# -DRILL_SHARED_KERNELS=ON: the executables share one librill_kernels.so, bundled once into lib/):
#   scripts/device/pack_carry.sh BUILD_DIR [EXECUTABLE...]
# (EXECUTABLE paths, e.g. build/bench/rill-bench; by default the list below. The checkout plus the carry must
# stay under the device tool's 64 MiB, so name fewer when the default is too large.)
# Writes .carry/c.tar.xz (bin/ + lib/). On the device: tar -xJf .carry/c.tar.xz -C /tmp/c, then
#   scripts/device/gpu_check.sh /tmp/c/bin /tmp/c/lib SECTION...
set -euo pipefail
build=${1:?usage: pack_carry.sh BUILD_DIR}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" .carry
shift
exes=("$@")
[ ${#exes[@]} -gt 0 ] || exes=("$build/bench/rill-bench" "$build/bench/rill-gemv-bench" "$build/bench/rill-attention-bench"
  "$build/bench/rill-sampling-bench" "$build/bench/rill-gemv-fp8-bench" "$build/tests/kernels/kernel_tests"
  "$build/tests/engine/cuda_engine_tests" "$build/tools/rill-make-model" "$build/tools/rill-ppl"
  "$build/tools/rill-quant-check" "$build/tools/rill-serve-bench")
for exe in "${exes[@]}"; do
  cp "$exe" "$stage/bin/"
done
strip "$stage"/bin/*
# ../shared beside the checkout (a git worktree under ../wt/ has it two levels up).
bundle=../shared/device/bundle-libs.sh
[ -f "$bundle" ] || bundle=../../shared/device/bundle-libs.sh
[ -f "$bundle" ] || { echo "pack_carry.sh: no shared/device/bundle-libs.sh beside the checkout" >&2; exit 1; }
bash "$bundle" "$stage/lib" "$stage"/bin/* >/dev/null
[ -f "$stage/lib/librill_kernels.so" ] && strip --strip-unneeded "$stage/lib/librill_kernels.so"
XZ_OPT=-9e tar -cJf .carry/c.tar.xz -C "$stage" bin lib
ls -l .carry/c.tar.xz
