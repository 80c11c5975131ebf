#!/usr/bin/env python3
"""Issue 29's prefix-caching figures from the reports scripts/device/prefix_cache_check.sh wrote
(rill-loadtest JSON), as markdown tables for docs/performance.md. Standard library only.

    scripts/device/prefix_cache_summary.py OUT_DIR
"""
import json
import os
import statistics
import sys


def load(out, name):
    path = os.path.join(out, f"prefix_{name}.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def shared_prefix(out):
    off, on = load(out, "shared-prefix_off"), load(out, "shared-prefix_on")
    if not off or not on:
        print("shared-prefix: reports missing\n")
        return
    print("Shared prefix (32 groups x 2,048-token system prompt + 128-token question, 128 output "
          "tokens), open-loop sweep:\n")
    print("| offered req/s | off: req/s | off: TTFT p50 ms | on: req/s | on: TTFT p50 ms | on: hit % |")
    print("|---:|---:|---:|---:|---:|---:|")
    on_by_load = {p["load"]: p for p in on["phases"]}
    for p in off["phases"]:
        q = on_by_load.get(p["load"])
        cells = [f'{p["load"]:g}', f'{p["summary"]["request_throughput"]:.2f}',
                 f'{p["summary"]["ttft_s"]["median"] * 1e3:.1f}']
        cells += ([f'{q["summary"]["request_throughput"]:.2f}', f'{q["summary"]["ttft_s"]["median"] * 1e3:.1f}',
                   f'{100 * q["summary"]["prefix_cache_hit_rate"]:.1f}'] if q else ["-", "-", "-"])
        print("| " + " | ".join(cells) + " |")
    for p in on["phases"][len(off["phases"]):]:
        print(f'| {p["load"]:g} | - | - | {p["summary"]["request_throughput"]:.2f} | '
              f'{p["summary"]["ttft_s"]["median"] * 1e3:.1f} | {100 * p["summary"]["prefix_cache_hit_rate"]:.1f} |')
    # Near saturation: the cache-off sweep's last point before the saturated one.
    unsaturated = [p for p in off["phases"] if not p["saturated"]]
    near = unsaturated[-1] if unsaturated else off["phases"][0]
    q = on_by_load.get(near["load"])
    if q:
        ratio = q["summary"]["ttft_s"]["median"] / near["summary"]["ttft_s"]["median"]
        print(f'\nAt {near["load"]:g} req/s (cache off near saturation): TTFT p50 '
              f'{q["summary"]["ttft_s"]["median"] * 1e3:.1f} ms on vs '
              f'{near["summary"]["ttft_s"]["median"] * 1e3:.1f} ms off = {100 * ratio:.1f}% '
              f'(target <= 25%: {"met" if ratio <= 0.25 else "NOT met"})')
    best_off = max(p["summary"]["request_throughput"] for p in off["phases"])
    best_on = max(p["summary"]["request_throughput"] for p in on["phases"])
    print(f"Saturation throughput: {best_on:.2f} req/s on vs {best_off:.2f} off = {best_on / best_off:.2f}x "
          f'(target >= 1.5x: {"met" if best_on >= 1.5 * best_off else "NOT met"})\n')


def multi_turn(out):
    runs = {mode: load(out, f"multi-turn_{mode}") for mode in ("off", "on")}
    if not all(runs.values()):
        print("multi-turn: reports missing\n")
        return
    print("Multi-turn chat (20 turns of 100 new + 100 generated tokens, history re-sent, 16 at a "
          "time), TTFT p50 by turn:\n")
    print("| turn | off: TTFT p50 ms | on: TTFT p50 ms | on: prompt cached % |")
    print("|---:|---:|---:|---:|")
    turns = {m: r["phases"][0]["summary"]["turns"] for m, r in runs.items()}
    for t_off, t_on in zip(turns["off"], turns["on"]):
        cached = 100 * t_on["cached_tokens"] / t_on["prompt_tokens"] if t_on["prompt_tokens"] else 0
        if t_off["turn"] in (0, 1, 4, 9, 14, 19):
            print(f'| {t_off["turn"] + 1} | {t_off["ttft_s"]["median"] * 1e3:.1f} | '
                  f'{t_on["ttft_s"]["median"] * 1e3:.1f} | {cached:.1f} |')
    for mode in ("off", "on"):
        first, last = turns[mode][0]["ttft_s"]["median"], turns[mode][-1]["ttft_s"]["median"]
        verdict = ("target <= 2x: " + ("met" if last <= 2 * first else "NOT met")) if mode == "on" else "grows"
        print(f"\n{mode}: TTFT turn {len(turns[mode])} / turn 1 = {last / first:.2f}x ({verdict})", end="")
    print("\n")


def no_hit(out):
    rows = {}
    for mode in ("off", "on"):
        for run in (1, 2):
            r = load(out, f"no-hit_{mode}_{run}")
            if r:
                rows.setdefault(mode, []).append(r["phases"][0]["summary"])
    if len(rows) < 2:
        print("no-hit: reports missing\n")
        return
    print("Random prompts, 0% hits (256 concurrent streams of 512 + 256 tokens), per run:\n")
    print("| cache | TPOT p50 ms | output tok/s | prompt cached % |")
    print("|---|---:|---:|---:|")
    for mode in ("off", "on"):
        for s in rows[mode]:
            print(f'| {mode} | {s["tpot_s"]["median"] * 1e3:.2f} | {s["output_token_throughput"]:.0f} | '
                  f'{100 * s["prefix_cache_hit_rate"]:.2f} |')
    tpot = {m: statistics.mean(s["tpot_s"]["median"] for s in rows[m]) for m in rows}
    thr = {m: statistics.mean(s["output_token_throughput"] for s in rows[m]) for m in rows}
    print(f'\nMean of runs: TPOT on / off = {tpot["on"] / tpot["off"]:.4f}, throughput on / off = '
          f'{thr["on"] / thr["off"]:.4f} (target within 1%: '
          f'{"met" if abs(tpot["on"] / tpot["off"] - 1) <= 0.01 and thr["on"] / thr["off"] >= 0.99 else "NOT met"})\n')


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("OUT", ".")
    shared_prefix(out)
    multi_turn(out)
    no_hit(out)


if __name__ == "__main__":
    main()
