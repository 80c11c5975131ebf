#!/usr/bin/env bash
# Runs on the GPU machine (it has torch, transformers, tokenizers): trains the default model and
# writes the golden references. Every stage packs its results into $OUT at once, so a later
# failure or timeout loses nothing; stages run even if an earlier one failed.
#   scripts/device/make_references.sh DATA_FILE [TRAIN_BUDGET_S]
# Afterwards the outputs are also copied into this checkout (models/, tests/) for GPU tests.
set -u
data=${1:?usage: make_references.sh DATA_FILE [TRAIN_BUDGET_S]}
budget=${2:-180}
out=/tmp/rill_refs
rm -rf "$out" && mkdir -p "$out/models" "$out/tests/fixtures" "$out/tests/golden" "$out/tok"
export PYTHONUNBUFFERED=1
python3 -c "import torch, transformers, tokenizers; print('torch', torch.__version__, 'transformers', transformers.__version__, 'tokenizers', tokenizers.__version__, torch.cuda.get_device_name())"
status=0
stage() { echo "=== $1 ($(date +%T))"; shift; local t=$SECONDS; "$@" || { echo "!!! stage failed: $*"; status=1; }; echo "=== took $((SECONDS - t)) s"; }
pack() { tar czf "$OUT/$1.tgz" -C "$out" "${@:2}" && echo "packed $1: $(du -h "$OUT/$1.tgz" | cut -f1)"; }

stage "fixtures" python3 tools/make_golden.py --text "$data" --fixtures "$out/tests/fixtures" --golden "$out/tests/golden/fixtures"
pack fixtures tests/fixtures tests/golden/fixtures
stage "training" python3 tools/train_tiny_model.py --data "$data" --out "$out/models/rill-shakespeare" --budget-s "$budget"
pack model models
if [ -f "$out/models/rill-shakespeare/model.safetensors" ]; then
  stage "default goldens" python3 tools/make_golden.py --model "$out/models/rill-shakespeare" --text "$data" \
      --golden "$out/tests/golden/default"
  stage "streaming reference (batched rows)" python3 tools/streaming_reference.py \
      --model "$out/models/rill-shakespeare" --ids "$out/tests/golden/default/default_eval_ids.json" \
      --golden-logits "$out/tests/golden/default/default_model.json" --methods full,recompute \
      --out "$out/tests/golden/default/streaming_gpu_part.json"
  pack default tests/golden/default
fi
# Make the outputs visible to GPU tests run from this checkout.
mkdir -p models tests/golden tests/fixtures
cp -r "$out/models/rill-shakespeare" models/ 2>/dev/null
cp -r "$out/tests/fixtures/." tests/fixtures/ 2>/dev/null
cp "$out"/tests/golden/fixtures/*.json "$out"/tests/golden/default/*.json tests/golden/ 2>/dev/null
ls -la "$OUT"
exit $status
