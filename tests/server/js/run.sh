#!/usr/bin/env bash
# Runs one OpenAI-JS-client test script (tests/server/js/*.mjs), installing the pinned client
# (package-lock.json) on first use.
set -euo pipefail
cd "$(dirname "$0")"
if [ ! -d node_modules/openai ] || [ ! -d node_modules/zod ]; then
  npm ci --no-audit --no-fund --loglevel=error
fi
exec node "$1"
