#!/usr/bin/env bash
# The main job on a fresh machine: install what is missing, build, and serve the embedded default
# model (models/rill-shakespeare) with rill-server: OpenAI-compatible HTTP on port 8000, gRPC on
# 50051 (the GPU when one is present, else the CPU engine). Extra arguments go to rill-server.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh
exec build/server/rill-server "$@"
