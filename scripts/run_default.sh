#!/usr/bin/env bash
# The main job on a fresh machine: install what is missing, build, and generate text with the
# embedded default model (models/rill-shakespeare). Extra arguments go to rill-run.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh
exec build/tools/rill-run --model models/rill-shakespeare --prompt "${PROMPT:-ROMEO:}" --max-tokens 200 "$@"
