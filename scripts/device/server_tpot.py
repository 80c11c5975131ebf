#!/usr/bin/env python3
"""Client-side TPOT of N concurrent streaming completions against a running rill-server, beside
the engine's own per-request TPOT (from /metrics) for the same requests: how much the HTTP front
end adds to the time per output token. Standard library only.

    scripts/device/server_tpot.py --http 127.0.0.1:8000 --streams 64 --prompt-len 512 --max-tokens 512

--constrained N: the first N streams are held to a JSON schema (response_format json_schema:
SCHEMA, whose long string outlasts max_tokens) and each group's TPOT is printed apart, with the
host time of the grammar masks (rill_grammar_mask_seconds) over the run.
"""
import argparse
import http.client
import json
import random
import re
import statistics
import threading
import time


def metric_sum_count(host, port, name):
    conn = http.client.HTTPConnection(host, port, timeout=30)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    total = count = 0.0
    for line in text.splitlines():
        m = re.match(r"^%s_(sum|count)(\{[^}]*\})? ([0-9.eE+-]+)$" % name, line)
        if m:
            if m.group(1) == "sum":
                total += float(m.group(3))
            else:
                count += float(m.group(3))
    return total, count


# A typical object (a bounded title, up to 8 tags) whose body string outlasts any max_tokens here.
SCHEMA = {"type": "object", "properties": {
    "title": {"type": "string", "maxLength": 40},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 8},
    "score": {"type": "integer", "minimum": 0, "maximum": 100},
    "body": {"type": "string", "minLength": 6000, "maxLength": 6000}},
    "required": ["title", "tags", "score", "body"]}


def stream_one(host, port, model, prompt, max_tokens, out, i, constrained=False):
    req = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "stream": True,
           "temperature": 0, "ignore_eos": True, "stream_options": {"include_usage": True}}
    if constrained:
        req["response_format"] = {"type": "json_schema", "json_schema": {"name": "doc", "schema": SCHEMA}}
    body = json.dumps(req)
    conn = http.client.HTTPConnection(host, port, timeout=600)
    t_sent = time.monotonic()
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        out[i] = {"error": "%d %s" % (resp.status, resp.read()[:200])}
        return
    times, completion = [], None
    for raw in resp:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        if chunk.get("usage"):
            completion = chunk["usage"]["completion_tokens"]
        if chunk.get("choices") and chunk["choices"][0].get("text"):
            times.append(time.monotonic())
    out[i] = {"sent": t_sent, "times": times, "completion": completion}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--http", default="127.0.0.1:8000")
    ap.add_argument("--streams", type=int, default=64)
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--max-tokens", type=int, default=512)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--constrained", type=int, default=0, help="streams held to SCHEMA (the first N)")
    args = ap.parse_args()
    host, port = args.http.rsplit(":", 1)
    port = int(port)
    conn = http.client.HTTPConnection(host, port, timeout=30)
    conn.request("GET", "/v1/models")
    model = json.loads(conn.getresponse().read())["data"][0]["id"]
    rng = random.Random(1)
    prompts = [[rng.randrange(args.vocab) for _ in range(args.prompt_len)] for _ in range(args.streams)]
    s0, c0 = metric_sum_count(host, port, "rill_time_per_output_token_seconds")
    m0, n0 = metric_sum_count(host, port, "rill_grammar_mask_seconds")
    out = [None] * args.streams
    threads = [threading.Thread(target=stream_one, args=(host, port, model, prompts[i], args.max_tokens, out, i,
                                                         i < args.constrained))
               for i in range(args.streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    s1, c1 = metric_sum_count(host, port, "rill_time_per_output_token_seconds")
    errors = [o for o in out if "error" in o]
    if errors:
        print("errors:", errors[:3])
        raise SystemExit(1)
    # Client TPOT: first text to last text over the tokens after the first (chunks may carry several).
    tpot = [(o["times"][-1] - o["times"][0]) / (o["completion"] - 1) for o in out if o["completion"] > 1]
    ttft = [o["times"][0] - o["sent"] for o in out]
    engine = (s1 - s0) / (c1 - c0) if c1 > c0 else float("nan")
    client = statistics.mean(tpot)
    print("%d streams x (%d prompt + %d output tokens) over HTTP/SSE" % (args.streams, args.prompt_len, args.max_tokens))
    print("client TPOT mean %.3f ms, median %.3f ms, p99 %.3f ms; TTFT median %.1f ms"
          % (client * 1e3, statistics.median(tpot) * 1e3, sorted(tpot)[int(0.99 * (len(tpot) - 1))] * 1e3,
             statistics.median(ttft) * 1e3))
    print("engine TPOT (rill_time_per_output_token_seconds, same requests) mean %.3f ms" % (engine * 1e3))
    print("client / engine: %+.2f%%" % ((client / engine - 1) * 100))
    if args.constrained:
        m1, n1 = metric_sum_count(host, port, "rill_grammar_mask_seconds")
        groups = (("constrained", out[:args.constrained]), ("unconstrained", out[args.constrained:]))
        for name, group in groups:
            t = [(o["times"][-1] - o["times"][0]) / (o["completion"] - 1) for o in group if o["completion"] > 1]
            if t:
                print("%s: %d streams, client TPOT mean %.3f ms, median %.3f ms, %.0f tokens each"
                      % (name, len(t), statistics.mean(t) * 1e3, statistics.median(t) * 1e3,
                         statistics.mean(o["completion"] for o in group)))
        if n1 > n0:
            print("grammar mask host time: mean %.1f us over %d masks" % ((m1 - m0) / (n1 - n0) * 1e6, n1 - n0))


if __name__ == "__main__":
    main()
