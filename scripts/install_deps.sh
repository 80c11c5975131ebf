#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages Rill builds with, skipping those already present.
# The CUDA toolkit is not installed here: when nvcc is on the PATH (or in /usr/local/cuda/bin)
# the CUDA engine is built too, otherwise the CPU engine alone.
set -euo pipefail
packages=(cmake ninja-build g++ pkg-config libspdlog-dev nlohmann-json3-dev libgtest-dev libgmock-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "rill: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
