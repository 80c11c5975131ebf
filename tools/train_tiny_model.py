#!/usr/bin/env python3
"""Trains Rill's embedded default model: a small Llama on Tiny Shakespeare.

  python3 tools/train_tiny_model.py --data ../shared/data/tinyshakespeare.txt \
      --out models/rill-shakespeare --budget-s 240

Steps (all seeded):
  1. Split the text: the first 90% trains, the last 10% is held out for validation.
  2. Train a byte-level BPE tokenizer (GPT-2 pre-tokenizer regex, vocabulary 4,096) on the
     training split; "<|endoftext|>" is BOS and EOS, and the post-processor prepends BOS.
  3. Sweep a few Llama shapes (GQA, RoPE, RMSNorm, SwiGLU, context 512) that stay under
     ~25 MB in bf16, each trained for a share of the time budget with early stopping on the
     validation loss; keep the best.
  4. Save with transformers' save_pretrained (bf16 safetensors) and write a model card with the
     real losses, the sweep, the device, the time taken and a sample generation.
"""
import argparse
import json
import math
import os
import random
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_compat import rope_kwargs  # noqa: E402

CONTEXT = 512
VOCAB = 4096
BOS = "<|endoftext|>"

# (name, layers, hidden, heads, kv_heads, intermediate, dropout); head_dim is 64 throughout.
SWEEP = [
    ("L6-H384-d0.1", 6, 384, 6, 2, 1024, 0.1),
    ("L6-H384-d0.2", 6, 384, 6, 2, 1024, 0.2),
    ("L8-H320-d0.1", 8, 320, 5, 1, 864, 0.1),
    ("L8-H320-d0.2", 8, 320, 5, 1, 864, 0.2),
]


def seed_all(seed):
    random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)


def split_text(text):
    cut = int(len(text) * 0.9)
    cut = text.rfind("\n", 0, cut) + 1  # split at a line boundary
    return text[:cut], text[cut:]


def train_tokenizer(train_text):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=[BOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(train_text.splitlines(keepends=True), trainer=trainer)
    bos_id = tok.token_to_id(BOS)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos_id)]
    )
    return tok


def save_tokenizer(tok, out):
    """Saves tokenizer.json + tokenizer_config.json through transformers' save_pretrained."""
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=BOS, eos_token=BOS, model_max_length=CONTEXT
    )
    fast.save_pretrained(out)


def make_model(spec, vocab_size, bos_id):
    from transformers import LlamaConfig, LlamaForCausalLM

    _, layers, hidden, heads, kv_heads, inter, _ = spec
    cfg = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=hidden // heads,
        max_position_embeddings=CONTEXT,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        bos_token_id=bos_id,
        eos_token_id=bos_id,
        attention_bias=False,
        mlp_bias=False,
        **rope_kwargs(LlamaConfig, 10000.0),
    )
    return LlamaForCausalLM(cfg)


def add_dropout(model, p):
    """Residual-stream dropout (Llama has none built in) through forward hooks, training only."""

    def hook(module, _inputs, output):
        if not module.training or p == 0:
            return output
        if isinstance(output, tuple):
            return (F.dropout(output[0], p, True),) + tuple(output[1:])
        return F.dropout(output, p, True)

    handles = [model.model.embed_tokens.register_forward_hook(hook)]
    for layer in model.model.layers:
        handles.append(layer.self_attn.register_forward_hook(hook))
        handles.append(layer.mlp.register_forward_hook(hook))
    return handles


def batch_windows(ids, bos_id, batch, gen):
    """Random training windows: [BOS] + 511 text tokens each, targets shifted by one."""
    n = CONTEXT - 1
    starts = torch.randint(0, len(ids) - n - 1, (batch,), generator=gen)
    rows = torch.stack([ids[s : s + n + 1] for s in starts.tolist()])
    bos = torch.full((batch, 1), bos_id, dtype=rows.dtype)
    x = torch.cat([bos, rows[:, :-1]], dim=1)  # (B, 512)
    y = rows  # (B, 512): BOS predicts rows[0], ...
    return x, y


def val_windows(ids, bos_id):
    """Non-overlapping validation windows covering the held-out ids."""
    n = CONTEXT - 1
    count = (len(ids) - 1) // n
    rows = torch.stack([ids[i * n : i * n + n + 1] for i in range(count)])
    bos = torch.full((count, 1), bos_id, dtype=rows.dtype)
    return torch.cat([bos, rows[:, :-1]], dim=1), rows


@torch.no_grad()
def evaluate(model, xs, ys, device, limit=None, batch=32, autocast=True):
    model.eval()
    total, count = 0.0, 0
    n = len(xs) if limit is None else min(limit, len(xs))
    for i in range(0, n, batch):
        x = xs[i : min(i + batch, n)].to(device)
        y = ys[i : min(i + batch, n)].to(device)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast and device == "cuda"):
            logits = model(input_ids=x).logits
        loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), y.reshape(-1), reduction="sum")
        total += loss.item()
        count += y.numel()
    model.train()
    return total / count


def train_one(spec, train_ids, val_x, val_y, vocab, bos_id, budget_s, device, seed, log):
    seed_all(seed)
    model = make_model(spec, vocab, bos_id).to(device)
    hooks = add_dropout(model, spec[6])
    params = sum(p.numel() for p in model.parameters())
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=2e-3, betas=(0.9, 0.95), fused=device == "cuda",
    )
    batch, warmup, max_steps, eval_every, patience = 64, 100, 4000, 50, 6
    gen = torch.Generator().manual_seed(seed)
    best, best_state, best_step, bad, step, train_loss = float("inf"), None, 0, 0, 0, float("nan")
    start = time.time()
    model.train()
    while step < max_steps and time.time() - start < budget_s:
        lr = 2e-3 * min(1.0, (step + 1) / warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / max_steps)))
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = batch_windows(train_ids, bos_id, batch, gen)
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
            logits = model(input_ids=x).logits
        loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        train_loss = loss.item() if step % 10 == 0 else train_loss
        if step % eval_every == 0:
            v = evaluate(model, val_x, val_y, device, limit=48)
            log(f"  {spec[0]} step {step:5d} train {train_loss:.4f} val~ {v:.4f} ({time.time() - start:.0f}s)")
            if v < best - 1e-4:
                best, best_step, bad = v, step, 0
                best_state = {k: t.detach().clone() for k, t in model.state_dict().items()}
            else:
                bad += 1
                if bad >= patience:
                    break
    for h in hooks:
        h.remove()
    if best_state is not None:
        model.load_state_dict(best_state)
    elapsed = time.time() - start
    return model, {"name": spec[0], "params": params, "steps": step, "best_step": best_step,
                   "val_subset": best, "seconds": elapsed}


def train_loss_full(model, train_ids, bos_id, device, windows=96, seed=7):
    gen = torch.Generator().manual_seed(seed)
    x, y = batch_windows(train_ids, bos_id, windows, gen)
    return evaluate(model, x, y, device, autocast=False)


def sample_text(model, tok, device, prompt="ROMEO:", tokens=120, seed=1):
    seed_all(seed)
    ids = torch.tensor([tok.encode(prompt).ids], device=device)
    model.eval()
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=tokens, do_sample=True, temperature=0.8, top_p=0.95,
                             pad_token_id=tok.token_to_id(BOS))
    return tok.decode(out[0].tolist(), skip_special_tokens=True)


def write_card(out, info):
    s = info
    sweep_rows = "\n".join(
        f"| {r['name']} | {r['params'] / 1e6:.2f} M | {r['steps']} | {r['best_step']} | {r['val_subset']:.4f} | {r['seconds']:.0f} s |"
        for r in s["sweep"])
    card = f"""# rill-shakespeare

Rill's embedded default model: a {s['params'] / 1e6:.1f} M-parameter Llama trained from scratch on
Tiny Shakespeare by `tools/train_tiny_model.py` (seed {s['seed']}), so that Rill serves text on a fresh
machine with no download. It writes Shakespeare-flavoured text; it knows nothing else.

## Data
- Tiny Shakespeare (`tinyshakespeare.txt`, {s['chars']:,} characters). The first 90% trains
  ({s['train_tokens']:,} tokens), the last 10% is held out for validation ({s['val_tokens']:,} tokens).
- Tokenizer: byte-level BPE (GPT-2 pre-tokenizer regex), vocabulary {s['vocab']:,}, trained on the
  training split; `<|endoftext|>` (id {s['bos_id']}) is BOS and EOS and is prepended to every sequence.

## Architecture
`LlamaForCausalLM`: {s['layers']} layers, hidden {s['hidden']}, {s['heads']} attention heads of
dimension {s['head_dim']} with {s['kv_heads']} key/value heads (GQA), SwiGLU MLP of width {s['inter']},
RMSNorm (eps 1e-5), RoPE (theta 10,000), tied input/output embeddings, context {CONTEXT} tokens.
{s['params']:,} parameters, stored in bf16 ({s['bytes'] / 1e6:.1f} MB).

## Training
AdamW (lr 2e-3, betas 0.9/0.95, weight decay 0.1, warm-up 100 steps, cosine), batch 64 x 512
tokens, bf16 autocast, residual dropout, early stopping on the validation loss. Each shape in the
sweep below was trained for at most {s['budget_each']:.0f} s; the best was kept.
Device: {s['device']}; total time {s['total_seconds']:.0f} s (tokenizer, sweep and evaluation).

| shape | parameters | steps | best step | val loss (subset) | time |
|---|---|---|---|---|---|
{sweep_rows}

## Final losses (bf16 weights as saved, evaluated in fp32)
- train loss: {s['train_loss']:.4f} (perplexity {math.exp(s['train_loss']):.1f}) on 96 random training windows
- validation loss: {s['val_loss']:.4f} (perplexity {math.exp(s['val_loss']):.1f}) on all held-out windows

## Sample
Prompt `ROMEO:`, temperature 0.8, top-p 0.95, seed 1, 120 tokens (transformers `generate`):

```
{s['sample']}
```
"""
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write(card)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget-s", type=float, default=240.0, help="training time for the whole sweep")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--smoke", action="store_true", help="a seconds-long run to check the pipeline")
    args = ap.parse_args()

    t0 = time.time()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = True
    log = lambda m: print(m, flush=True)  # noqa: E731
    seed_all(args.seed)
    text = open(args.data, encoding="utf-8").read()
    train_text, val_text = split_text(text)
    tok = train_tokenizer(train_text)
    os.makedirs(args.out, exist_ok=True)
    save_tokenizer(tok, args.out)
    bos_id = tok.token_to_id(BOS)
    train_ids = torch.tensor(tok.encode(train_text, add_special_tokens=False).ids, dtype=torch.long)
    val_ids = torch.tensor(tok.encode(val_text, add_special_tokens=False).ids, dtype=torch.long)
    vocab = tok.get_vocab_size()
    log(f"tokenizer: vocab {vocab}, train {len(train_ids)} tokens, val {len(val_ids)} tokens")
    val_x, val_y = val_windows(val_ids, bos_id)

    sweep = SWEEP[:1] if args.smoke else SWEEP
    budget_each = (3.0 if args.smoke else args.budget_s / len(sweep))
    best_model, results = None, []
    for i, spec in enumerate(sweep):
        model, res = train_one(spec, train_ids, val_x, val_y, vocab, bos_id, budget_each, device,
                               args.seed + i, log)
        results.append(res)
        log(f"{res['name']}: {res['params']} params, {res['steps']} steps, best val~ {res['val_subset']:.4f}")
        if best_model is None or res["val_subset"] < best_res["val_subset"]:
            best_model, best_res, best_spec = model, res, spec
        else:
            del model
    model = best_model.to(torch.bfloat16).to(torch.float32)  # the losses of the weights as saved
    val_loss = evaluate(model, val_x, val_y, device, autocast=False)
    train_loss = train_loss_full(model, train_ids, bos_id, device)
    log(f"best {best_res['name']}: train loss {train_loss:.4f}, val loss {val_loss:.4f}")

    from transformers import GenerationConfig

    model.generation_config = GenerationConfig(
        bos_token_id=bos_id, eos_token_id=bos_id, pad_token_id=bos_id, do_sample=True,
        temperature=0.8, top_p=0.95, max_new_tokens=256)
    sample = sample_text(model, tok, device)
    model.to(torch.bfloat16).save_pretrained(args.out, safe_serialization=True)
    nbytes = os.path.getsize(os.path.join(args.out, "model.safetensors"))
    _, layers, hidden, heads, kv_heads, inter, _ = best_spec
    write_card(args.out, {
        "params": best_res["params"], "seed": args.seed, "chars": len(text),
        "train_tokens": len(train_ids), "val_tokens": len(val_ids), "vocab": vocab, "bos_id": bos_id,
        "layers": layers, "hidden": hidden, "heads": heads, "head_dim": hidden // heads,
        "kv_heads": kv_heads, "inter": inter, "bytes": nbytes, "budget_each": budget_each,
        "device": torch.cuda.get_device_name() if device == "cuda" else "CPU",
        "total_seconds": time.time() - t0, "sweep": results, "train_loss": train_loss,
        "val_loss": val_loss, "sample": sample,
    })
    with open(os.path.join(args.out, "training_log.json"), "w") as f:
        json.dump({"sweep": results, "train_loss": train_loss, "val_loss": val_loss,
                   "best": best_res["name"], "seconds": time.time() - t0}, f, indent=1)
    log(f"saved {args.out} ({nbytes / 1e6:.1f} MB) in {time.time() - t0:.0f} s")
    log("sample:\n" + sample)


if __name__ == "__main__":
    main()
