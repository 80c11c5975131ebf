#!/usr/bin/env python3
"""Shrinks a rill-loadtest run for the repository: the JSON without the inter-token gaps of all but
every Nth request (the other per-request fields are kept) and times rounded to a microsecond, and the HTML report rebuilt from the
original's page around that JSON. The ITL distribution of the rebuilt report is drawn from the
sampled requests' gaps.

usage: compact_loadtest_report.py RUN.json RUN.html OUT_PREFIX [--itl-every N]"""
import argparse
import json

TAG = '<script type="application/json" id="rill-data">'


def rounded(v):
    """Floats to 6 decimals (a microsecond for seconds), recursively."""
    if isinstance(v, float):
        return round(v, 6)
    if isinstance(v, list):
        return [rounded(x) for x in v]
    if isinstance(v, dict):
        return {k: rounded(x) for k, x in v.items()}
    return v


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("json")
    ap.add_argument("html")
    ap.add_argument("out_prefix")
    ap.add_argument("--itl-every", type=int, default=10)
    a = ap.parse_args()
    report = json.load(open(a.json))
    for phase in report.get("phases", []):
        for i, r in enumerate(phase.get("requests", [])):
            if i % a.itl_every:
                r["itl_s"] = []
    report = rounded(report)
    report["compacted"] = (f"inter-token gaps kept for every {a.itl_every}th request, times rounded to 1 us "
                           "(scripts/compact_loadtest_report.py)")
    data = json.dumps(report, separators=(",", ":"))
    json.dump(report, open(a.out_prefix + ".json", "w"), indent=None, separators=(",", ":"))
    page = open(a.html).read()
    start = page.index(TAG) + len(TAG)
    end = page.index("</script>", start)
    with open(a.out_prefix + ".html", "w") as f:
        f.write(page[:start] + data.replace("</", "<\\/") + page[end:])


if __name__ == "__main__":
    main()
