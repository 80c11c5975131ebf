#!/usr/bin/env python3
"""Independent PyTorch reference for StreamingLLM (Xiao et al., ICLR 2024) on a Llama checkpoint.

  python3 tools/streaming_reference.py --model models/rill-shakespeare \
      --ids tests/golden/default_eval_ids.json --golden-logits tests/golden/default_model.json \
      --out tests/golden/streaming_default.json

The held-out ids come from tools/make_golden.py (the model's Hugging Face tokenizer), so this
script needs only torch. --methods picks rows (full,window,recompute,streaming,generation) and
--merge combines partial outputs, so the batched rows can run on a GPU and the token-by-token
rows on a CPU.

This is written from the paper's description, not from Rill's code, and shares nothing with it:
  * keys are cached BEFORE RoPE; at every step all cached keys are rotated with positions assigned
    within the cache (0 .. cache_len-1), and the query takes the next position;
  * when the cache is full, the first n_sink tokens are kept plus the most recent tokens, so that
    with the incoming token there are n_sink + window entries;
  * the text is fed one token at a time (the paper's streaming setting).

It records the per-token negative log-likelihood on the held-out 10% of Tiny Shakespeare (the
same split as tools/train_tiny_model.py) for the methods of the paper's comparison:
  full       dense attention within the training context (independent 512-token chunks, each
             starting with BOS);
  window     the most recent `window` tokens only (no sinks);
  recompute  sliding window with re-computation: every token re-encodes its last `window`
             tokens from scratch, positions 0..window-1;
  streaming  n_sink attention sinks + a rolling window, several (n_sink, window) pairs;
and the greedy tokens of a long generation that runs far past a small cache.
The dense path is checked against transformers' logits from tests/golden/default_model.json.
"""
import argparse
import json
import math
import os
import struct
import time

import torch
import torch.nn.functional as F


def load_safetensors(path):
    """Minimal safetensors reader (header JSON + raw little-endian tensors) -> float32 tensors."""
    dtypes = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        t = torch.frombuffer(bytearray(data[base + a : base + b]), dtype=dtypes[info["dtype"]])
        out[name] = t.reshape(info["shape"]).float()
    return out


class Llama:
    """A plain fp32 Llama (RMSNorm, SwiGLU, RoPE rotate-half, GQA) from config.json + safetensors."""

    def __init__(self, model_dir, device):
        cfg = json.load(open(os.path.join(model_dir, "config.json")))
        assert cfg["architectures"][0] == "LlamaForCausalLM", cfg["architectures"]
        rp = cfg.get("rope_parameters") or {}
        theta = rp.get("rope_theta", cfg.get("rope_theta", 10000.0))
        assert (rp.get("rope_type") or "default") == "default" and not cfg.get("rope_scaling")
        self.h = cfg["num_attention_heads"]
        self.kvh = cfg.get("num_key_value_heads", self.h)
        self.d = cfg.get("head_dim") or cfg["hidden_size"] // self.h
        self.eps = cfg["rms_norm_eps"]
        self.layers = cfg["num_hidden_layers"]
        w = load_safetensors(os.path.join(model_dir, "model.safetensors"))
        self.w = {k: v.to(device) for k, v in w.items()}
        self.emb = self.w["model.embed_tokens.weight"]
        self.head = self.w.get("lm_head.weight", self.emb)
        self.inv_freq = 1.0 / (theta ** (torch.arange(0, self.d, 2, device=device).float() / self.d))
        self.device = device

    def norm(self, x, name):
        var = x.pow(2).mean(-1, keepdim=True)
        return x * torch.rsqrt(var + self.eps) * self.w[name]

    def rope(self, x, pos):
        """x (..., T, heads, d), pos (T,) -> rotated with the rotate-half convention."""
        ang = pos.float()[:, None] * self.inv_freq[None, :]  # (T, d/2)
        cos = torch.cat([ang.cos(), ang.cos()], -1)[:, None, :]
        sin = torch.cat([ang.sin(), ang.sin()], -1)[:, None, :]
        x1, x2 = x[..., : self.d // 2], x[..., self.d // 2 :]
        return x * cos + torch.cat([-x2, x1], -1) * sin

    def qkv(self, x, i):
        p = f"model.layers.{i}.self_attn."
        q = (x @ self.w[p + "q_proj.weight"].T).unflatten(-1, (self.h, self.d))
        k = (x @ self.w[p + "k_proj.weight"].T).unflatten(-1, (self.kvh, self.d))
        v = (x @ self.w[p + "v_proj.weight"].T).unflatten(-1, (self.kvh, self.d))
        return q, k, v

    def attend(self, q, k, v, mask):
        """q (B,T,h,d) k,v (B,S,kvh,d) mask (T,S) bool (True = attend) -> (B,T,h*d)."""
        rep = self.h // self.kvh
        k = k.repeat_interleave(rep, dim=2)
        v = v.repeat_interleave(rep, dim=2)
        s = torch.einsum("bthd,bshd->bhts", q, k) / math.sqrt(self.d)
        s = s.masked_fill(~mask, float("-inf"))
        p = torch.softmax(s, -1)
        return torch.einsum("bhts,bshd->bthd", p, v).flatten(-2)

    def mlp(self, x, i):
        p = f"model.layers.{i}.mlp."
        g = x @ self.w[p + "gate_proj.weight"].T
        u = x @ self.w[p + "up_proj.weight"].T
        return (F.silu(g) * u) @ self.w[p + "down_proj.weight"].T

    def dense(self, ids):
        """Causal forward over (B, T) ids at positions 0..T-1 -> logits (B, T, V)."""
        B, T = ids.shape
        x = self.emb[ids]
        pos = torch.arange(T, device=self.device)
        mask = torch.ones(T, T, dtype=torch.bool, device=self.device).tril()
        for i in range(self.layers):
            h = self.norm(x, f"model.layers.{i}.input_layernorm.weight")
            q, k, v = self.qkv(h, i)
            a = self.attend(self.rope(q, pos), self.rope(k, pos), v, mask)
            x = x + a @ self.w[f"model.layers.{i}.self_attn.o_proj.weight"].T
            x = x + self.mlp(self.norm(x, f"model.layers.{i}.post_attention_layernorm.weight"), i)
        return self.norm(x, "model.norm.weight") @ self.head.T


class StreamingCache:
    """The paper's cache: per layer, pre-RoPE keys and values; sinks + most recent tokens."""

    def __init__(self, model, n_sink, window):
        self.m, self.n_sink, self.window = model, n_sink, window
        self.k = [None] * model.layers  # (1, S, kvh, d), not rotated
        self.v = [None] * model.layers

    def evict_for_one(self):
        size = self.n_sink + self.window
        n = 0 if self.k[0] is None else self.k[0].shape[1]
        if n + 1 <= size:
            return
        keep = list(range(self.n_sink)) + list(range(n - self.window + 1, n))
        idx = torch.tensor(keep, device=self.m.device)
        for i in range(self.m.layers):
            self.k[i] = self.k[i][:, idx]
            self.v[i] = self.v[i][:, idx]

    @torch.no_grad()
    def step(self, token):
        """Feeds one token; returns its logits (V,)."""
        m = self.m
        self.evict_for_one()
        x = m.emb[torch.tensor([[token]], device=m.device)]  # (1, 1, hidden)
        for i in range(m.layers):
            h = m.norm(x, f"model.layers.{i}.input_layernorm.weight")
            q, k, v = m.qkv(h, i)
            self.k[i] = k if self.k[i] is None else torch.cat([self.k[i], k], 1)
            self.v[i] = v if self.v[i] is None else torch.cat([self.v[i], v], 1)
            n = self.k[i].shape[1]
            pos = torch.arange(n, device=m.device)  # positions within the cache
            kr = m.rope(self.k[i], pos)
            qr = m.rope(q, pos[-1:])
            mask = torch.ones(1, n, dtype=torch.bool, device=m.device)
            a = m.attend(qr, kr, self.v[i], mask)
            x = x + a @ m.w[f"model.layers.{i}.self_attn.o_proj.weight"].T
            x = x + m.mlp(m.norm(x, f"model.layers.{i}.post_attention_layernorm.weight"), i)
        return (m.norm(x, "model.norm.weight") @ m.head.T)[0, 0]


def nll_of(logits, target):
    return float(-torch.log_softmax(logits.double(), -1)[target])


@torch.no_grad()
def ppl_full(m, stream, ctx):
    """Independent chunks of ctx tokens: [BOS] + ctx-1 text tokens predicting ctx tokens."""
    bos, text = stream[0], stream[1:] + [None]
    nll = []
    for a in range(0, len(stream) - 1, ctx):
        targets = [t for t in text[a : a + ctx] if t is not None]
        inp = torch.tensor([[bos] + targets[:-1]], device=m.device)
        lp = torch.log_softmax(m.dense(inp)[0].double(), -1)
        nll += [float(-lp[j, t]) for j, t in enumerate(targets)]
    return nll


@torch.no_grad()
def ppl_stream(m, stream, n_sink, window):
    cache, nll = StreamingCache(m, n_sink, window), []
    for k in range(len(stream) - 1):
        nll.append(nll_of(cache.step(stream[k]), stream[k + 1]))
    return nll


@torch.no_grad()
def ppl_recompute(m, stream, window, batch=64):
    n = len(stream) - 1
    first = torch.tensor([stream[:window]], device=m.device)
    lp = torch.log_softmax(m.dense(first)[0].double(), -1)
    nll = [float(-lp[k, stream[k + 1]]) for k in range(min(window, n))]
    starts = list(range(1, n - window + 1))  # window ending at stream index s + window - 1
    for b in range(0, len(starts), batch):
        rows = torch.tensor([stream[s : s + window] for s in starts[b : b + batch]], device=m.device)
        lp = torch.log_softmax(m.dense(rows)[:, -1].double(), -1)
        for j, s in enumerate(starts[b : b + batch]):
            nll.append(float(-lp[j, stream[s + window]]))
    return nll


@torch.no_grad()
def long_generation(m, prompt_ids, n_sink, window, steps):
    cache = StreamingCache(m, n_sink, window)
    for t in prompt_ids[:-1]:
        cache.step(t)
    tok, out, margin = prompt_ids[-1], [], float("inf")
    for _ in range(steps):
        logits = cache.step(tok).double()
        top2 = torch.topk(logits, 2).values
        margin = min(margin, float(top2[0] - top2[1]))
        tok = int(torch.argmax(logits))
        out.append(tok)
    return out, margin


def check_against_golden_logits(m, golden_path):
    """Cross-checks the independent dense pass against transformers' logits (tools/make_golden.py)."""
    g = json.load(open(golden_path))
    worst = 0.0
    for case in g["cases"]:
        ids = case["prompt_ids"] + case["greedy_ids"][: len(case["logits"]) - 1]
        logits = m.dense(torch.tensor([ids], device=m.device))[0]
        n = len(case["prompt_ids"])
        for step, ref in enumerate(case["logits"]):
            ours = logits[n - 1 + step].double().cpu()
            worst = max(worst, (ours - torch.tensor(ref, dtype=torch.float64)).abs().max().item())
    print(f"dense vs transformers golden logits: max |diff| = {worst:.2e}", flush=True)
    assert worst < 1e-3, worst
    return worst


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--ids", required=True, help="JSON with bos_id, eval_ids, prompt_ids (tools/make_golden.py)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--methods", default="full,window,recompute,streaming,generation")
    ap.add_argument("--golden-logits", help="default_model.json: cross-check the dense pass against transformers")
    ap.add_argument("--merge", nargs="*", default=[], help="partial outputs to merge into --out")
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--pairs", default="1:255,4:252,8:248,4:508", help="n_sink:window pairs")
    ap.add_argument("--window", type=int, default=256, help="window of the window-only and recompute rows")
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_num_threads(max(1, os.cpu_count() or 1))

    spec = json.load(open(args.ids))
    bos, eval_ids, prompt = spec["bos_id"], spec["eval_ids"], spec["prompt_ids"]
    stream = [bos] + eval_ids  # predictions for every eval token
    out = {"model": "models/" + os.path.basename(os.path.normpath(args.model)), "bos_id": bos,
           "context": args.context, "eval_ids": eval_ids, "methods": [], "devices": []}
    for part in args.merge:
        p = json.load(open(part))
        out["methods"] += p["methods"]
        out["devices"] += p.get("devices", [])
        for key in ("long_generation", "golden_logits_max_diff"):
            if key in p:
                out[key] = p[key]
    m = Llama(args.model, device)
    out["devices"].append(torch.cuda.get_device_name() if device == "cuda" else "cpu")
    if args.golden_logits:
        out["golden_logits_max_diff"] = check_against_golden_logits(m, args.golden_logits)
    # The step-by-step cache with no eviction must equal the dense pass.
    probe = stream[:64]
    c = StreamingCache(m, 0, 10**9)
    step_logits = torch.stack([c.step(t) for t in probe])
    dense_logits = m.dense(torch.tensor([probe], device=device))[0]
    sd = (step_logits - dense_logits).abs().max().item()
    print(f"token-by-token vs dense: max |logit diff| = {sd:.2e}", flush=True)
    assert sd < 1e-3, sd

    def record(mode, n_sink, window, nll, seconds):
        ppl = math.exp(sum(nll) / len(nll))
        out["methods"].append({"mode": mode, "n_sink": n_sink, "window": window, "ppl": round(ppl, 5),
                               "seconds": round(seconds, 2), "device": out["devices"][-1],
                               "nll": [float(f"{x:.6g}") for x in nll]})
        print(f"{mode:10s} sink {n_sink:2d} window {window:4d}: ppl {ppl:9.3f}  ({seconds:.1f} s)", flush=True)

    methods = args.methods.split(",")
    if "full" in methods:
        t = time.time(); record("full", 0, args.context, ppl_full(m, stream, args.context), time.time() - t)
    if "window" in methods:
        t = time.time(); record("window", 0, args.window, ppl_stream(m, stream, 0, args.window), time.time() - t)
    if "recompute" in methods:
        t = time.time(); record("recompute", 0, args.window, ppl_recompute(m, stream, args.window), time.time() - t)
    if "streaming" in methods:
        for pair in args.pairs.split(","):
            s, w = (int(x) for x in pair.split(":"))
            t = time.time(); record("streaming", s, w, ppl_stream(m, stream, s, w), time.time() - t)
    if "generation" in methods:
        gen, margin = long_generation(m, prompt, 4, 60, 600)
        print(f"long generation: 600 tokens past a 4+60 cache, min greedy margin {margin:.4f}", flush=True)
        out["long_generation"] = {"prompt_ids": prompt, "n_sink": 4, "window": 60, "greedy_ids": gen,
                                  "min_margin": round(margin, 6)}
    with open(args.out, "w") as f:
        json.dump(out, f, separators=(",", ":"))
    print(f"wrote {args.out}", flush=True)


if __name__ == "__main__":
    main()
