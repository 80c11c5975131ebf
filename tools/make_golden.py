#!/usr/bin/env python3
"""Writes the golden references that Rill's engines are tested against, with transformers (fp32).

  python3 tools/make_golden.py --model models/rill-shakespeare --text ../shared/data/tinyshakespeare.txt \
      --fixtures tests/fixtures --golden tests/golden
  python3 tools/make_golden.py --text ../shared/data/tinyshakespeare.txt \
      --fixtures tests/fixtures --golden tests/golden --only gpt_neox_hd80,llama_hd96

Produces
  tests/fixtures/<name>/          tiny random-initialised checkpoints (fixed seeds), one per
                                  supported architecture, in Hugging Face format (and one in
                                  llama2.c format), each with a small byte-level BPE tokenizer;
  tests/golden/<name>.json        their greedy continuations and first-step logits;
  tests/golden/default_model.json greedy continuations (64 tokens) and first-step logits of the
                                  default model;
  tests/golden/default_tokenizer.json  the default tokenizer's ids for a set of strings.

Greedy decoding is a plain loop over full forward passes (no KV cache, no `generate`), in fp32 on
the CPU, so the references do not depend on cache or kernel choices. Every greedy step records the
margin between the two largest logits; each fixture keeps the seed (of SEEDS) with the widest
smallest margin, so a correct fp32 engine cannot flip a near-tie, and fp16/bf16 tests know which
steps are close calls.
"""
import argparse
import json
import os
import shutil
import struct
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_compat import from_pretrained_fp32, rope_kwargs  # noqa: E402

MIN_MARGIN = 1e-3  # fp32 engines agree to ~1e-5; tests read per-step margins for fp16/bf16
SEEDS = range(100, 108)
FIXTURE_VOCAB = 512
LOGIT_STEPS = 3

DEFAULT_PROMPTS = [
    "ROMEO:",
    "First Citizen:\nBefore we proceed any further, hear me speak.",
    "To be, or not to be, that is the question:",
    "",
]
FIXTURE_PROMPTS = ["KING HENRY:", "O, what a noble mind is here o'erthrown!", "Thou art"]
TOKENIZER_STRINGS = [
    "", " ", "  ", "Hello, world!", "ROMEO:\nBut, soft! what light through yonder window breaks?",
    "a  b   c    d", "\n\n\t x", "trailing spaces   ", "   leading", "line\r\nbreak",
    "12345 3.14159 1,000,000", "I'm you're they'll DON'T we'VE", "!!!???...---",
    "caf\u00e9 na\u00efve \u00fcber se\u00f1or", "e\u0301 (decomposed)", "\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac",
    "\u0420\u0443\u0441\u0441\u043a\u0438\u0439", "\u4e2d\u6587\u5b57\u7b26 \u65e5\u672c\u8a9e", "\u0627\u0644\u0639\u0631\u0628\u064a\u0629",
    "emoji \U0001f916\U0001f44d\U0001f3fd \U0001f469\u200d\U0001f4bb", "<|endoftext|>hello<|endoftext|>",
    "def f(x):\n    return x * 2  # code", "Thou " * 50,
]


def fixture_tokenizer(text, out_dir):
    """A small byte-level BPE tokenizer shared by the fixtures (BOS = <|endoftext|>)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=FIXTURE_VOCAB, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(text[:200000].splitlines(keepends=True), trainer=trainer)
    bos = tok.token_to_id("<|endoftext|>")
    tok.post_processor = processors.TemplateProcessing(single="<|endoftext|> $A",
                                                       special_tokens=[("<|endoftext|>", bos)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>")
    fast.save_pretrained(out_dir)
    assert tok.get_vocab_size() == FIXTURE_VOCAB, tok.get_vocab_size()
    return tok


@torch.no_grad()
def greedy(model, prompt_ids, steps, logit_steps=LOGIT_STEPS):
    """Greedy continuation by full forward passes; returns tokens, first logits and per-step margins."""
    ids = list(prompt_ids)
    out, logits_rec, margins = [], [], []
    for i in range(steps):
        logits = model(input_ids=torch.tensor([ids])).logits[0, -1].double()
        top2 = torch.topk(logits, 2).values
        margins.append(round(float(top2[0] - top2[1]), 6))
        if i < logit_steps:
            logits_rec.append([float(f"{v:.6g}") for v in logits.tolist()])
        nxt = int(torch.argmax(logits))
        out.append(nxt)
        ids.append(nxt)
    return out, logits_rec, margins


def golden_cases(model, prompts_ids, steps):
    """Greedy cases; `margins` (top-1 minus top-2 logit per step) tell tests where ties are close."""
    cases, worst = [], float("inf")
    for prompt, ids in prompts_ids:
        toks, logits, margins = greedy(model, ids, steps)
        worst = min(worst, min(margins))
        cases.append({"prompt": prompt, "prompt_ids": ids, "greedy_ids": toks, "logits": logits,
                      "margins": margins})
    return cases, worst


def save_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, separators=(",", ":"))
    print(f"wrote {path} ({os.path.getsize(path) / 1e3:.0f} KB)", flush=True)


# ---------------------------------------------------------------------------------------------
# Architecture fixtures
# ---------------------------------------------------------------------------------------------

def fixture_specs():
    from transformers import (GPTNeoXConfig, GPTNeoXForCausalLM, LlamaConfig, LlamaForCausalLM,
                              MistralConfig, MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM)

    v = FIXTURE_VOCAB
    common = dict(vocab_size=v, bos_token_id=0, eos_token_id=0, max_position_embeddings=256)
    return [
        # name, model class, config, storage dtype, save kwargs
        # head_dim 64 up to the last two: the dimension the CUDA kernels are tuned for (64, 128).
        ("llama_gqa_tied", LlamaForCausalLM, LlamaConfig(
            hidden_size=128, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
            num_key_value_heads=1, head_dim=64, rms_norm_eps=1e-5, tie_word_embeddings=True,
            **rope_kwargs(LlamaConfig, 10000.0), **common), torch.float32, {}),
        ("llama3_rope_scaling", LlamaForCausalLM, LlamaConfig(
            hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=2,
            num_key_value_heads=1, head_dim=64, rms_norm_eps=1e-5, tie_word_embeddings=False,
            **rope_kwargs(LlamaConfig, 500000.0, {"rope_type": "llama3", "factor": 8.0,
                                                  "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                  "original_max_position_embeddings": 32}),
            **common), torch.float16, {}),
        # head_dim * heads (128) != hidden (64), and a sliding window shorter than the generation.
        ("mistral", MistralForCausalLM, MistralConfig(
            hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=2,
            num_key_value_heads=1, head_dim=64, rms_norm_eps=1e-6, tie_word_embeddings=False,
            sliding_window=24, **rope_kwargs(MistralConfig, 10000.0), **common), torch.bfloat16, {}),
        ("qwen2", Qwen2ForCausalLM, Qwen2Config(
            hidden_size=128, intermediate_size=224, num_hidden_layers=2, num_attention_heads=2,
            num_key_value_heads=1, rms_norm_eps=1e-6, tie_word_embeddings=False, use_sliding_window=False,
            **rope_kwargs(Qwen2Config, 1000000.0), **common), torch.float32, {"max_shard_size": "150KB"}),
        ("gpt_neox", GPTNeoXForCausalLM, GPTNeoXConfig(
            hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=2,
            hidden_act="gelu", layer_norm_eps=1e-5, use_parallel_residual=True, tie_word_embeddings=False,
            **rope_kwargs(GPTNeoXConfig, 10000.0, partial_rotary_factor=0.25), **common), torch.float16, {}),
        ("gpt_neox_sequential", GPTNeoXForCausalLM, GPTNeoXConfig(
            hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=2,
            hidden_act="gelu_new", layer_norm_eps=1e-5, use_parallel_residual=False, tie_word_embeddings=False,
            **rope_kwargs(GPTNeoXConfig, 10000.0, partial_rotary_factor=0.5), **common), torch.bfloat16, {}),
        # The CUDA kernels' other head dims. 80 (Pythia-2.8B's shape: 25% rotary, 20 dims, which
        # RoPE cannot fuse into decode attention) and 96 (Phi-3-mini's head_dim, with GQA).
        ("gpt_neox_hd80", GPTNeoXForCausalLM, GPTNeoXConfig(
            hidden_size=160, intermediate_size=256, num_hidden_layers=2, num_attention_heads=2,
            hidden_act="gelu", layer_norm_eps=1e-5, use_parallel_residual=True, tie_word_embeddings=False,
            **rope_kwargs(GPTNeoXConfig, 10000.0, partial_rotary_factor=0.25), **common), torch.float16, {}),
        ("llama_hd96", LlamaForCausalLM, LlamaConfig(
            hidden_size=192, intermediate_size=256, num_hidden_layers=2, num_attention_heads=2,
            num_key_value_heads=1, head_dim=96, rms_norm_eps=1e-5, tie_word_embeddings=False,
            **rope_kwargs(LlamaConfig, 10000.0), **common), torch.bfloat16, {}),
    ]


def init_fixture(model_cls, config, seed):
    torch.manual_seed(seed)
    config.initializer_range = 0.15  # larger than usual so logits are peaked and greedy is robust
    model = model_cls(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0.0, 0.1)
            elif p.dim() == 1:  # norm weights: away from 1 so they matter
                p.uniform_(0.6, 1.4)
    return model


def make_fixture(name, model_cls, config, dtype, save_kw, tok_dir, fixtures_dir, tok):
    """Saves a fixture; of SEEDS seeds keeps the one whose greedy runs have the widest top-1 margin."""
    path = os.path.join(fixtures_dir, name)
    best = None
    for seed in SEEDS:
        model = init_fixture(model_cls, config, seed)
        shutil.rmtree(path, ignore_errors=True)
        os.makedirs(path)
        model.to(dtype).save_pretrained(path, safe_serialization=True, **save_kw)
        ref = from_pretrained_fp32(model_cls, path).eval()  # the stored (rounded) weights, upcast
        prompts = [(p, tok.encode(p).ids) for p in FIXTURE_PROMPTS]
        cases, worst = golden_cases(ref, prompts, 32)
        if best is None or worst > best[0]:
            best = (worst, seed)
    worst, seed = best
    if worst < MIN_MARGIN:
        raise SystemExit(f"fixture {name}: best greedy margin {worst:.2e} < {MIN_MARGIN}")
    model = init_fixture(model_cls, config, seed)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    model.to(dtype).save_pretrained(path, safe_serialization=True, **save_kw)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tok_dir, f), path)
    ref = from_pretrained_fp32(model_cls, path).eval()
    cases, worst = golden_cases(ref, [(p, tok.encode(p).ids) for p in FIXTURE_PROMPTS], 32)
    print(f"fixture {name}: seed {seed}, min greedy margin {worst:.4f}", flush=True)
    return path, ref, cases, seed


def write_llama2c(hf_dir, ref_model, out_dir, tok):
    """Exports a Llama fixture in llama2.c's legacy format (version 0, Meta's rotary layout)."""
    cfg = ref_model.config
    sd = {k: v.float() for k, v in ref_model.state_dict().items()}
    dim, layers = cfg.hidden_size, cfg.num_hidden_layers
    heads, kv_heads, hidden = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.intermediate_size
    head_dim = dim // heads
    assert head_dim * heads == dim, "llama2.c needs head_dim * heads == dim"

    def unpermute(w, n_heads):  # HF (rotate_half) layout -> Meta (interleaved pairs) layout
        d1, d2 = w.shape
        return w.view(n_heads, 2, d1 // n_heads // 2, d2).transpose(1, 2).reshape(d1, d2)

    shared = cfg.tie_word_embeddings
    seq_len = cfg.max_position_embeddings
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "model.bin"), "wb") as f:
        vocab = cfg.vocab_size if shared else -cfg.vocab_size
        f.write(struct.pack("7i", dim, hidden, layers, heads, kv_heads, vocab, seq_len))
        def w(t):
            f.write(t.contiguous().numpy().astype("<f4").tobytes())
        p = "model.layers.{}."
        w(sd["model.embed_tokens.weight"])
        for i in range(layers): w(sd[p.format(i) + "input_layernorm.weight"])
        for i in range(layers): w(unpermute(sd[p.format(i) + "self_attn.q_proj.weight"], heads))
        for i in range(layers): w(unpermute(sd[p.format(i) + "self_attn.k_proj.weight"], kv_heads))
        for i in range(layers): w(sd[p.format(i) + "self_attn.v_proj.weight"])
        for i in range(layers): w(sd[p.format(i) + "self_attn.o_proj.weight"])
        for i in range(layers): w(sd[p.format(i) + "post_attention_layernorm.weight"])
        for i in range(layers): w(sd[p.format(i) + "mlp.gate_proj.weight"])
        for i in range(layers): w(sd[p.format(i) + "mlp.down_proj.weight"])
        for i in range(layers): w(sd[p.format(i) + "mlp.up_proj.weight"])
        w(sd["model.norm.weight"])
        freqs = 1.0 / (10000.0 ** (torch.arange(0, head_dim, 2).float() / head_dim))
        ang = torch.outer(torch.arange(seq_len).float(), freqs)
        w(torch.cos(ang))
        w(torch.sin(ang))
        if not shared:
            w(sd["lm_head.weight"])
    # tokenizer.bin: llama2.c's format with this fixture's vocabulary (decoded bytes, score 0).
    vocab_list = [tok.decode([i], skip_special_tokens=False).encode("utf-8") for i in range(cfg.vocab_size)]
    with open(os.path.join(out_dir, "tokenizer.bin"), "wb") as f:
        f.write(struct.pack("i", max(len(b) for b in vocab_list)))
        for b in vocab_list:
            f.write(struct.pack("fi", 0.0, len(b)))
            f.write(b)


def make_fixtures(text, fixtures_dir, golden_dir, tmp_dir, only=None):
    """All fixtures, or those named in `only` (llama2c comes with llama_gqa_tied)."""
    specs = fixture_specs()
    if only:
        unknown = set(only) - {spec[0] for spec in specs}
        if unknown:
            raise SystemExit(f"--only: unknown fixtures {sorted(unknown)} "
                             f"(known: {', '.join(spec[0] for spec in specs)})")
        specs = [spec for spec in specs if spec[0] in only]
    tok_dir = os.path.join(tmp_dir, "fixture_tokenizer")
    os.makedirs(tok_dir, exist_ok=True)
    tok = fixture_tokenizer(text, tok_dir)
    for name, cls, cfg, dtype, save_kw in specs:
        path, ref, cases, seed = make_fixture(name, cls, cfg, dtype, save_kw, tok_dir, fixtures_dir, tok)
        save_json(os.path.join(golden_dir, f"{name}.json"), {
            "model": f"tests/fixtures/{name}",
            "architecture": cls.__name__, "stored_dtype": str(dtype).replace("torch.", ""),
            "seed": seed, "cases": cases})
        if name == "llama_gqa_tied":
            l2c = os.path.join(fixtures_dir, "llama2c")
            write_llama2c(path, ref, l2c, tok)
            save_json(os.path.join(golden_dir, "llama2c.json"), {
                "model": "tests/fixtures/llama2c/model.bin",
                "architecture": "llama2.c", "stored_dtype": "float32", "seed": seed,
                "cases": cases})


# ---------------------------------------------------------------------------------------------
# Default model
# ---------------------------------------------------------------------------------------------

def make_default(model_dir, golden_dir):
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM

    tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    model = from_pretrained_fp32(AutoModelForCausalLM, model_dir).eval()
    prompts = [(p, tok.encode(p).ids) for p in DEFAULT_PROMPTS]
    cases, worst = golden_cases(model, prompts, 64)
    print(f"default model: min greedy margin {worst:.4f}", flush=True)
    save_json(os.path.join(golden_dir, "default_model.json"), {
        "model": "models/" + os.path.basename(os.path.normpath(model_dir)),
        "architecture": type(model).__name__, "cases": cases})
    tcases = []
    for s in TOKENIZER_STRINGS:
        ids = tok.encode(s).ids
        plain = tok.encode(s, add_special_tokens=False).ids
        tcases.append({"text": s, "ids": ids, "ids_no_special": plain,
                       "decoded": tok.decode(ids, skip_special_tokens=True),
                       "decoded_with_special": tok.decode(ids, skip_special_tokens=False)})
    save_json(os.path.join(golden_dir, "default_tokenizer.json"), {
        "tokenizer": "models/" + os.path.basename(os.path.normpath(model_dir)), "cases": tcases})


def write_eval_ids(model_dir, text, out_path, tokens):
    """The held-out split (the training script's last 10%) tokenized by the model's own tokenizer."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    cut = text.rfind("\n", 0, int(len(text) * 0.9)) + 1
    ids = tok.encode(text[cut:], add_special_tokens=False).ids[:tokens]
    bos = json.load(open(os.path.join(model_dir, "config.json")))["bos_token_id"]
    prompt = [bos] + tok.encode("ROMEO:", add_special_tokens=False).ids
    save_json(out_path, {"bos_id": bos, "eval_ids": ids, "prompt_ids": prompt})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", help="default model directory (skipped when absent)")
    ap.add_argument("--text", required=True, help="tinyshakespeare.txt (trains the fixture tokenizer)")
    ap.add_argument("--fixtures", help="fixture directory (fixtures skipped when absent)")
    ap.add_argument("--golden", required=True)
    ap.add_argument("--only", help="comma-separated fixture names: write only these fixtures and "
                    "their goldens (e.g. gpt_neox_hd80,llama_hd96); the default model is still written "
                    "when --model is given")
    ap.add_argument("--tmp", default="/tmp/rill_golden")
    ap.add_argument("--eval-tokens", type=int, default=10240, help="held-out tokens for the streaming reference")
    args = ap.parse_args()
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    os.makedirs(args.golden, exist_ok=True)
    if args.fixtures:
        os.makedirs(args.fixtures, exist_ok=True)
        text = open(args.text, encoding="utf-8").read()
        make_fixtures(text, args.fixtures, args.golden, args.tmp,
                      [n for n in args.only.split(",") if n] if args.only else None)
    if args.model:
        make_default(args.model, args.golden)
        write_eval_ids(args.model, open(args.text, encoding="utf-8").read(),
                       os.path.join(args.golden, "default_eval_ids.json"), args.eval_tokens)


if __name__ == "__main__":
    main()
