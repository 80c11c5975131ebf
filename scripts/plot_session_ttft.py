#!/usr/bin/env python3
"""Plots per-turn time to first token from `rill-session-bench --mode conversation --json` as a
self-contained SVG: the session (sinks + window cache kept between turns) against the same
conversation re-sent whole each turn with a `full` cache.

usage: plot_session_ttft.py BENCH.json OUT.svg [--title TEXT]"""
import argparse
import json
import math

W, H = 880, 420
LEFT, RIGHT, TOP, BOTTOM = 70, 20, 40, 50


def nice_ticks(hi, n=5):
    step = 10 ** math.floor(math.log10(hi / n))
    for m in (1, 2, 5, 10):
        if hi / (step * m) <= n:
            step *= m
            break
    return [i * step for i in range(int(hi / step) + 1)]


def polyline(points, sx, sy, color):
    pts = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in points)
    return f'<polyline fill="none" stroke="{color}" stroke-width="1.2" points="{pts}"/>'


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bench")
    ap.add_argument("out")
    ap.add_argument("--title", default="Time to first token per turn")
    a = ap.parse_args()
    data = json.load(open(a.bench))
    session = [(t["turn"] + 1, t["ttft_ms"]) for t in data["session"]]
    resend = [(t["turn"] + 1, t["ttft_ms"]) for t in data["resend"]]
    xmax = max(x for x, _ in session)
    ymax = max(y for _, y in session + resend) * 1.08
    sx = lambda x: LEFT + (x - 1) / max(1, xmax - 1) * (W - LEFT - RIGHT)
    sy = lambda y: H - BOTTOM - y / ymax * (H - TOP - BOTTOM)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W / 2}" y="22" text-anchor="middle" font-size="14">{a.title}</text>']
    for y in nice_ticks(ymax):
        out.append(f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{sy(y):.1f}" y2="{sy(y):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{LEFT - 6}" y="{sy(y) + 4:.1f}" text-anchor="end">{y:g}</text>')
    for x in nice_ticks(xmax):
        if x < 1:
            continue
        out.append(f'<text x="{sx(x):.1f}" y="{H - BOTTOM + 16}" text-anchor="middle">{x:g}</text>')
    out.append(f'<text x="{W / 2}" y="{H - 12}" text-anchor="middle">turn</text>')
    out.append(f'<text x="16" y="{H / 2}" text-anchor="middle" transform="rotate(-90 16 {H / 2})">TTFT (ms)</text>')
    out.append(f'<line x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{H - BOTTOM}" stroke="black"/>')
    out.append(f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{H - BOTTOM}" y2="{H - BOTTOM}" stroke="black"/>')
    out.append(polyline(session, sx, sy, "#1f77b4"))
    out.append(polyline(resend, sx, sy, "#d62728"))
    if resend:  # where the re-sent conversation ran out of context
        x, y = resend[-1]
        out.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="#d62728"/>')
        out.append(f'<text x="{sx(x) + 6:.1f}" y="{sy(y) + 4:.1f}">context full</text>')
    lx = W - RIGHT - 330
    out.append(f'<line x1="{lx}" x2="{lx + 24}" y1="{TOP + 10}" y2="{TOP + 10}" stroke="#1f77b4" stroke-width="2"/>')
    out.append(f'<text x="{lx + 30}" y="{TOP + 14}">session (sinks + window kept between turns)</text>')
    out.append(f'<line x1="{lx}" x2="{lx + 24}" y1="{TOP + 28}" y2="{TOP + 28}" stroke="#d62728" stroke-width="2"/>')
    out.append(f'<text x="{lx + 30}" y="{TOP + 32}">whole history re-sent each turn (full cache)</text>')
    out.append("</svg>")
    open(a.out, "w").write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
