#!/usr/bin/env python3
"""Tables of scripts/device/tpot_check.sh's rill-loadtest reports (issue 33), as Markdown.

usage: tpot_summary.py REPORT_DIR SECTION [--svg OUT.svg]

mix / gap: one row a run (REPORT_DIR/<run>.json): the long-lived streams' ITL before the
arrivals (mean) and during them (p50, p99, p99 / steady mean), the arrivals' TTFT p50 / p99,
and every gap during the arrivals (streams and arrivals) as the client saw it beside the
server's own ITL histogram (p50 / p99) over the same window: the client-side gap is the
difference between those two.
sweep: goodput (requests meeting TTFT <= 500 ms and TPOT <= 25 ms, per second, and as a share
of those completed) per point (rate, prompt length) and planner; with --svg, a grouped bar chart
of the goodput share, self-contained."""
import argparse
import glob
import json
import os
import re

CONFIGS = ["adaptive", "fixed512", "fixed2048", "fixed8192"]
COLORS = {"adaptive": "#1f77b4", "fixed512": "#ff7f0e", "fixed2048": "#2ca02c", "fixed8192": "#d62728"}


def ms(v):
    return "-" if v is None else f"{v * 1e3:.1f}"


def load(path):
    with open(path) as f:
        return json.load(f)


def mix_rows(directory, prefixes):
    rows = ["| run | streams' ITL before: mean ms | during: p50 / p99 ms | p99 / steady | arrivals' TTFT p50 / p99 ms "
            "| all gaps during, client p50 / p99 ms | server histogram p50 / p99 ms | failed |",
            "|---|---|---|---|---|---|---|---|"]
    for path in sorted(glob.glob(os.path.join(directory, "*.json"))):
        name = os.path.basename(path)[:-5]
        if not name.startswith(prefixes):
            continue
        j = load(path)
        if not j.get("streams") or not j["phases"]:
            continue
        b, p = j["streams"], j["phases"][0]
        d, s, server = p["streams"], p["summary"], p["server"] or {}
        rows.append(f"| {name} | {ms(b['itl_before_s']['mean'])} | {ms(d['itl_s']['median'])} / {ms(d['itl_s']['p99'])} "
                    f"| {d['p99_over_steady']:.2f}x | {ms(s['ttft_s']['median'])} / {ms(s['ttft_s']['p99'])} "
                    f"| {ms(d['itl_all_s']['median'])} / {ms(d['itl_all_s']['p99'])} "
                    f"| {ms(server.get('itl_p50_s'))} / {ms(server.get('itl_p99_s'))} | {s['failed']} |")
    return rows


def sweep_points(directory):
    """{(rate, len): {config: (goodput req/s, share of completed, ttft p50, tpot p50, good requests)}}"""
    points = {}
    for path in glob.glob(os.path.join(directory, "sweep_*.json")):
        m = re.match(r"sweep_(\w+?)_r([\d.]+)_l(\d+)\.json$", os.path.basename(path))
        if not m:
            continue
        j = load(path)
        s = j["phases"][0]["summary"]
        share = s["good_requests"] / s["completed"] if s["completed"] else 0.0
        points.setdefault((float(m.group(2)), int(m.group(3))), {})[m.group(1)] = (
            s["goodput"] or 0.0, share, s["ttft_s"]["median"], s["tpot_s"]["median"],
            s["good_requests"])
    return points


def sweep_rows(points):
    head = "| rate /s | prompt | " + " | ".join(f"{c}: goodput /s (share), TTFT p50, TPOT p50" for c in CONFIGS) + \
        " | adaptive >= best fixed |"
    rows = [head, "|" + "---|" * (len(CONFIGS) + 3)]
    for (rate, length), by in sorted(points.items()):
        cells = []
        for c in CONFIGS:
            if c not in by:
                cells.append("-")
                continue
            g, share, ttft, tpot, _ = by[c]
            cells.append(f"{g:.2f} ({share:.0%}), {ms(ttft)}, {ms(tpot)}")
        # Every configuration gets the same arrivals (the same seed), so the verdict compares the
        # requests that met both targets: goodput per second also divides by each run's duration
        # (to its last answer), which differs by milliseconds where every request was good.
        fixed = [by[c][4] for c in CONFIGS[1:] if c in by]
        ok = "adaptive" in by and fixed and by["adaptive"][4] >= max(fixed)
        rows.append(f"| {rate:g} | {length} | " + " | ".join(cells) + f" | {'yes' if ok else 'no'} |")
    return rows


def sweep_svg(points, path):
    keys = sorted(points)
    W, H, L, B, T = 120 + 110 * len(keys), 360, 60, 60, 40
    bar = 20
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="11">',
           f'<text x="{W / 2}" y="20" text-anchor="middle" font-size="13">Goodput share (TTFT &lt;= 500 ms, TPOT &lt;= 25 ms), '
           'Llama-2-7B on H100</text>']
    sy = lambda v: H - B - v * (H - B - T)
    for i in range(6):
        v = i / 5
        out.append(f'<line x1="{L}" x2="{W - 10}" y1="{sy(v):.1f}" y2="{sy(v):.1f}" stroke="#eee"/>')
        out.append(f'<text x="{L - 6}" y="{sy(v) + 4:.1f}" text-anchor="end">{v:.0%}</text>')
    for k, key in enumerate(keys):
        x0 = L + 20 + k * 110
        for c_i, c in enumerate(CONFIGS):
            share = points[key].get(c, (0, 0))[1]
            out.append(f'<rect x="{x0 + c_i * bar}" y="{sy(share):.1f}" width="{bar - 2}" '
                       f'height="{H - B - sy(share):.1f}" fill="{COLORS[c]}"/>')
        out.append(f'<text x="{x0 + 2 * bar}" y="{H - B + 16}" text-anchor="middle">{key[0]:g}/s x {key[1]}</text>')
    for c_i, c in enumerate(CONFIGS):
        out.append(f'<rect x="{L + c_i * 110}" y="{H - 24}" width="10" height="10" fill="{COLORS[c]}"/>'
                   f'<text x="{L + c_i * 110 + 14}" y="{H - 15}">{c}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("directory")
    ap.add_argument("section", choices=["mix", "gap", "sweep"])
    ap.add_argument("--svg")
    a = ap.parse_args()
    if a.section in ("mix", "gap"):
        rows = mix_rows(a.directory, ("mix_",) if a.section == "mix" else ("gap_",))
    else:
        points = sweep_points(a.directory)
        rows = sweep_rows(points)
        if a.svg and points:
            sweep_svg(points, a.svg)
    print("\n".join(rows))


if __name__ == "__main__":
    main()
