#!/usr/bin/env bash
# Configures and builds Rill into build/ (Release). CUDA is used when nvcc is found; set
# CUDA_ARCH (default 90a, the H100/H200) for other GPUs.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90a}" "$@"
cmake --build build -j "$(nproc)"
