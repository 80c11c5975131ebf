#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages Rill builds with, skipping those already present.
# The CUDA toolkit is not installed here: when nvcc is on the PATH (or in /usr/local/cuda/bin)
# the CUDA engine is built too, otherwise the CPU engine alone.
set -euo pipefail
packages=(cmake ninja-build g++ pkg-config libspdlog-dev nlohmann-json3-dev libgtest-dev libgmock-dev
  # rill-server: gRPC + Protobuf, Boost.Beast (header-only), CLI11
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc libboost1.81-dev libcli11-dev
  # server tests: promtool, Python grpcio (node + npm for the OpenAI JS client: below)
  prometheus python3-grpcio python3-protobuf python3-jsonschema
  # deployment tests (tests/deploy): YAML checks of docker/ and docker/k8s/
  python3-yaml
  # rill-loadtest's report test: the HTML report opened in headless Chromium
  chromium
  # fuzzing and the sanitized server tests (scripts/test_fuzz.sh, test_asan.sh): clang, its
  # libFuzzer and sanitizer runtimes (not pulled in by clang without recommends), and
  # llvm-symbolizer for the reports' stack traces
  clang libclang-rt-dev llvm)
# Ubuntu 24.04 (the CUDA base image of docker/Dockerfile) has no Boost 1.81; its default Boost
# (1.83) serves the same headers.
if [ -r /etc/os-release ] && grep -q '^ID=ubuntu' /etc/os-release; then
  packages=("${packages[@]/#libboost1.81-dev/libboost-dev}")
  # Ubuntu ships Chromium only as a snap (no snapd in containers): the report test skips there.
  packages=("${packages[@]/#chromium/}")
fi
# Node.js and npm only where no `node` / `npm` is on the PATH: a NodeSource nodejs (which ships
# npm) conflicts with Debian's npm package.
command -v node >/dev/null || packages+=(nodejs)
command -v npm >/dev/null || packages+=(npm)
missing=()
for p in "${packages[@]}"; do
  [ -n "$p" ] || continue
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "rill: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# The OpenAI JS client the server's end-to-end tests use (pinned by tests/server/js/package-lock.json).
js_dir="$(cd "$(dirname "$0")/.." && pwd)/tests/server/js"
if command -v npm >/dev/null && [ ! -d "$js_dir/node_modules/openai" ]; then
  (cd "$js_dir" && npm ci --no-audit --no-fund --loglevel=error)
fi
