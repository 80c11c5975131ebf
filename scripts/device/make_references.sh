#!/usr/bin/env bash
# Runs on the GPU machine (it has torch, transformers, tokenizers): trains the default model and
# writes every golden reference. Each stage runs even if an earlier one failed, so one bug does
# not waste the others; results are packed into $OUT/references.tgz.
#   scripts/device/make_references.sh DATA_FILE [TRAIN_BUDGET_S]
set -u
data=${1:?usage: make_references.sh DATA_FILE [TRAIN_BUDGET_S]}
budget=${2:-180}
out=/tmp/rill_refs
rm -rf "$out" && mkdir -p "$out/models" "$out/tests/fixtures" "$out/tests/golden" "$out/tok"
export PYTHONUNBUFFERED=1
python3 -c "import torch, transformers, tokenizers; print('torch', torch.__version__, 'transformers', transformers.__version__, 'tokenizers', tokenizers.__version__, torch.cuda.get_device_name())"
status=0
stage() { echo "=== $1"; shift; local t=$SECONDS; "$@" || { echo "!!! stage failed: $*"; status=1; }; echo "=== took $((SECONDS - t)) s"; }

stage "smoke training" python3 tools/train_tiny_model.py --data "$data" --out /tmp/smoke --smoke
stage "fixtures" python3 tools/make_golden.py --text "$data" --fixtures "$out/tests/fixtures" --golden "$out/tests/golden"
if [ -f tools/make_tokenizer_fixtures.py ]; then
  stage "tokenizer fixtures" python3 tools/make_tokenizer_fixtures.py --text "$data" --out "$out/tok"
fi
stage "training" python3 tools/train_tiny_model.py --data "$data" --out "$out/models/rill-shakespeare" --budget-s "$budget"
if [ -f "$out/models/rill-shakespeare/model.safetensors" ]; then
  stage "default goldens" python3 tools/make_golden.py --model "$out/models/rill-shakespeare" --text "$data" \
      --golden "$out/tests/golden"
  stage "streaming reference" python3 tools/streaming_reference.py --model "$out/models/rill-shakespeare" \
      --text "$data" --out "$out/tests/golden/streaming_default.json"
fi
tar czf "$OUT/references.tgz" -C "$out" .
ls -la "$OUT"
exit $status
