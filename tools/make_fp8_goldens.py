#!/usr/bin/env python3
"""Writes the golden references of the fp8 fixtures with transformers (fp32, on the CPU):

  python3 tools/make_fp8_goldens.py --fixtures tests/fixtures --golden tests/golden

For each fixture of tools/make_fp8_fixtures.py, transformers runs the dequantized fp32 model
(tests/fixtures/<name>/dequantized) and tests/golden/<name>.json records its greedy continuations
(32 tokens of each fixture prompt), first-step logits and per-step margins, exactly as
tools/make_golden.py does for the architecture fixtures. The golden's "model" is the fp8
checkpoint itself, which Rill's CPU engine must match token for token (fp8_model_test.cc).

With --check-fp8 it also loads each fp8 checkpoint through transformers' own fp8 support (quant
method fp8: FineGrainedFP8; compressed-tensors: needs the compressed-tensors package) and reports
how far its logits are from the dequantized model's (information only: those paths compute in
bf16 with quantized activations).
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_compat import from_pretrained_fp32  # noqa: E402
from make_golden import FIXTURE_PROMPTS, MIN_MARGIN, golden_cases, save_json  # noqa: E402

FIXTURES = ["fp8_ct_channel", "fp8_ct_tensor", "fp8_block"]
STEPS = 32


def golden(fixtures_dir, golden_dir, name):
    from tokenizers import Tokenizer
    from transformers import LlamaForCausalLM

    path = os.path.join(fixtures_dir, name)
    tok = Tokenizer.from_file(os.path.join(path, "tokenizer.json"))
    model = from_pretrained_fp32(LlamaForCausalLM, os.path.join(path, "dequantized")).eval()
    prompts = [(p, tok.encode(p).ids) for p in FIXTURE_PROMPTS]
    with torch.no_grad():
        cases, worst = golden_cases(model, prompts, STEPS)
    print(f"{name}: min greedy margin {worst:.4f}", flush=True)
    if worst < MIN_MARGIN:
        raise SystemExit(f"{name}: greedy margin {worst:.2e} < {MIN_MARGIN}: pick another seed in "
                         "tools/make_fp8_fixtures.py")
    save_json(os.path.join(golden_dir, f"{name}.json"), {
        "model": f"tests/fixtures/{name}", "reference": f"tests/fixtures/{name}/dequantized",
        "architecture": "LlamaForCausalLM", "stored_dtype": "float8_e4m3fn", "cases": cases})
    return model, tok


def check_fp8(fixtures_dir, name, ref, tok):
    from transformers import AutoModelForCausalLM

    path = os.path.join(fixtures_dir, name)
    try:
        model = AutoModelForCausalLM.from_pretrained(path, device_map="cuda").eval()
    except Exception as e:  # noqa: BLE001 - report and go on: this check is information only
        print(f"{name}: transformers could not load the fp8 checkpoint: {e}", flush=True)
        return
    ids = torch.tensor([tok.encode(FIXTURE_PROMPTS[1]).ids])
    with torch.no_grad():
        got = model(input_ids=ids.cuda()).logits[0, -1].float().cpu()
        want = ref(input_ids=ids).logits[0, -1].float()
    print(f"{name}: transformers fp8 vs dequantized fp32: max |logit diff| "
          f"{(got - want).abs().max().item():.4f} (logit range {want.abs().max().item():.2f}), "
          f"argmax {int(got.argmax())} vs {int(want.argmax())}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fixtures", required=True)
    ap.add_argument("--golden", required=True)
    ap.add_argument("--check-fp8", action="store_true")
    args = ap.parse_args()
    os.makedirs(args.golden, exist_ok=True)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    for name in FIXTURES:
        ref, tok = golden(args.fixtures, args.golden, name)
        if args.check_fp8:
            check_fp8(args.fixtures, name, ref, tok)


if __name__ == "__main__":
    main()
