"""rill-loadtest against the real rill-server (CPU, loopback, ephemeral ports), one case per CTest
test: `rill_loadtest_test.py CASE`. Every case checks that the run had no errors, that its JSON
holds every metric, and that its request and token counts match the server's /metrics, scraped
here independently of the tool, before and after it ran.

Cases: http_open, grpc_closed, sweep, multi_turn, shared_prefix, streaming_cache, cancel,
html_report, concurrency_1000, streams."""
import csv
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zlib

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../server"))
from harness import SOURCE_DIR, Server, metric_value  # noqa: E402

LOADTEST = os.environ.get("RILL_LOADTEST",
                          os.path.join(SOURCE_DIR, "build/clients/rill_loadtest/rill-loadtest"))
SKIP = 77  # CTest's SKIP_RETURN_CODE for this test
LATENCIES = ("ttft_s", "tpot_s", "itl_s", "e2e_s")
STATS = ("count", "mean", "median", "std", "p90", "p99")
THROUGHPUTS = ("request_throughput", "output_token_throughput", "total_token_throughput")


class Run:
    """One rill-loadtest invocation against `server`, with the server's /metrics around it."""

    def __init__(self, server, protocol, *args, tmp, name="run", expect_rc=0, sample_threads=False):
        self.prefix = os.path.join(tmp, name)
        target = f"127.0.0.1:{server.http_port if protocol == 'http' else server.grpc_port}"
        cmd = [LOADTEST, f"--{protocol}", target, "--metrics-url", f"{server.base}/metrics",
               "--out", self.prefix, "--seed", "7", *args]
        self.before = server.metrics()
        started = time.time()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.max_threads = 0
        while sample_threads and proc.poll() is None:
            try:
                self.max_threads = max(self.max_threads, len(os.listdir(f"/proc/{proc.pid}/task")))
            except FileNotFoundError:
                break
            time.sleep(0.05)
        self.stdout, self.stderr = proc.communicate(timeout=240)
        self.seconds = time.time() - started
        print(f"$ {' '.join(cmd)}\n  rc {proc.returncode} in {self.seconds:.1f} s")
        assert proc.returncode == expect_rc, (proc.returncode, self.stdout, self.stderr)
        # The server counts a request when it finishes; the tool already waited for that.
        self.after = server.metrics()
        with open(self.prefix + ".json") as f:
            self.json = json.load(f)
        with open(self.prefix + ".csv") as f:
            self.csv = list(csv.DictReader(f))

    def delta(self, name, **labels):
        return metric_value(self.after, name, **labels) - metric_value(self.before, name, **labels)

    def requests(self):
        return [r for p in self.json["phases"] for r in p["requests"]]


def check_metrics_present(run, slo=False):
    """Every summary metric of every phase is in the JSON, with sensible values."""
    j = run.json
    for key in ("config", "warmup", "phases", "sweep"):
        assert key in j, key
    for phase in j["phases"]:
        s = phase["summary"]
        for lat in LATENCIES:
            for stat in STATS:
                assert stat in s[lat], (lat, stat)
            assert s[lat]["count"] > 0 and s[lat]["mean"] > 0, (lat, s[lat])
            assert s[lat]["p99"] >= s[lat]["p90"] >= s[lat]["median"] > 0, (lat, s[lat])
        for key in THROUGHPUTS:
            assert s[key] > 0, (key, s)
        assert s["duration_s"] > 0 and s["completed"] > 0
        assert s["failed"] == 0 and s["errors"] == {}, s["errors"]
        assert (s["goodput"] is not None) == slo, s["goodput"]
        server = phase["server"]
        assert server is not None, j["metrics_error"]
        for key in ("ttft_mean_s", "tpot_mean_s", "itl_mean_s", "e2e_mean_s"):
            assert server[key] is not None and server[key] > 0, (key, server)
        assert phase["checks"] and all(c["passed"] for c in phase["checks"]), phase["checks"]
        assert phase["time_series"], "no time series"
        for r in phase["requests"]:
            assert r["error"] == "", r
            if not r["cancelled"]:
                assert r["ttft_s"] > 0 and r["e2e_s"] >= r["ttft_s"], r
    assert len(run.csv) == len(run.requests()), (len(run.csv), len(run.requests()))
    assert "Serving Benchmark Result" in run.stdout and "Request throughput" in run.stdout


def check_counts(run, warmup_tokens=0):
    """The client's request and token counts equal the server's deltas (scraped here)."""
    j = run.json
    reasons = {}
    tokens = warmup_tokens
    for phase in j["phases"]:
        s = phase["summary"]
        for reason, n in s["finish_reasons"].items():
            reasons[reason] = reasons.get(reason, 0) + n
        if s["cancelled"]:
            reasons["cancelled"] = reasons.get("cancelled", 0) + s["cancelled"]
        tokens += s["output_tokens_including_cancelled"]
    warmup = j["warmup"]["requests"]
    if warmup:
        reasons["length"] = reasons.get("length", 0) + warmup
    for reason in ("stop", "length", "cancelled", "deadline", "error"):
        got = run.delta("rill_requests_total", finished_reason=reason)
        assert got == reasons.get(reason, 0), (reason, got, reasons)
    generated = run.delta("rill_generation_tokens_total")
    if reasons.get("cancelled"):
        assert generated >= tokens, (generated, tokens)  # tokens generated but never read
    else:
        assert generated == tokens, (generated, tokens)
    if not warmup and not reasons.get("cancelled"):
        prompt = sum(p["summary"]["input_tokens"] for p in j["phases"])
        assert run.delta("rill_prompt_tokens_total") == prompt, (run.delta("rill_prompt_tokens_total"), prompt)
    assert metric_value(run.after, "rill_requests_running") == metric_value(run.before, "rill_requests_running")


def case_http_open(server, tmp):
    run = Run(server, "http", "--rate", "20", "--num-requests", "30", "--input-len", "32",
              "--input-len-dist", "uniform:0.5", "--output-len", "16", "--warmup-requests", "3",
              "--slo", "ttft:5000,tpot:1000", tmp=tmp)
    check_metrics_present(run, slo=True)
    check_counts(run, warmup_tokens=3 * 16)
    phase = run.json["phases"][0]
    assert phase["mode"] == "open" and len(phase["requests"]) == 30
    assert run.json["warmup"] == {"requests": 3, "errors": 0}
    prompt_lens = [r["prompt_tokens"] for r in phase["requests"]]
    assert all(16 <= n <= 48 for n in prompt_lens) and len(set(prompt_lens)) > 3, prompt_lens
    assert all(r["output_tokens"] == 16 for r in phase["requests"])
    assert phase["summary"]["good_requests"] == 30
    # Errors are tallied by HTTP status, with the server's message, and exit with 1.
    bad = Run(server, "http", "--model", "no-such-model", "--num-requests", "3", tmp=tmp, name="bad",
              expect_rc=1)
    s = bad.json["phases"][0]["summary"]
    assert s["errors"] == {"HTTP 404": 3} and s["completed"] == 0, s
    assert "no-such-model" in bad.json["phases"][0]["requests"][0]["error_message"]
    assert "HTTP 404:" in bad.stdout


def case_grpc_closed(server, tmp):
    run = Run(server, "grpc", "--concurrency", "6", "--num-requests", "30", "--ramp-up", "0.5",
              "--input-len", "16", "--output-len", "16", "--output-len-dist", "uniform:0.5", tmp=tmp)
    check_metrics_present(run)
    check_counts(run)
    s = run.json["phases"][0]["summary"]
    assert run.json["phases"][0]["mode"] == "closed" and s["completed"] == 30
    assert s["max_in_flight"] <= 6, s["max_in_flight"]
    outs = [r["output_tokens"] for r in run.requests()]
    assert all(8 <= n <= 24 for n in outs) and len(set(outs)) > 3, outs
    assert all(r["prompt_tokens"] == 16 for r in run.requests())
    # The ramp: slots grow from 1 to 6 over 0.5 s (2 by 0.1 s, each request taking >= 16 token
    # steps), so at most 4 requests start in the first 0.1 s; without it, 6 start at once.
    early = [r for r in run.requests() if r["start_s"] < 0.1]
    assert len(early) <= 4, early
    # A duration bound: no request starts after 1 s; the ones in flight finish.
    timed = Run(server, "grpc", "--concurrency", "4", "--duration", "1", "--output-len", "8",
                tmp=tmp, name="timed")
    check_metrics_present(timed)
    check_counts(timed)
    starts = [r["start_s"] for r in timed.requests()]
    assert len(starts) > 4 and max(starts) < 1.05, starts
    # Errors are tallied by gRPC code: a prompt longer than the 512-token context.
    bad = Run(server, "grpc", "--input-len", "600", "--num-requests", "2", tmp=tmp, name="bad",
              expect_rc=1)
    assert bad.json["phases"][0]["summary"]["errors"] == {"grpc INVALID_ARGUMENT": 2}, bad.json


def case_sweep(server, tmp):
    # Constant arrivals: 2 req/s is served as offered (the last request's E2E, a small part of the
    # 4 s run, even on a busy machine: the bound is 0.75 here); 1000 req/s of 8 requests is not
    # (achieved ~ 3% of offered), so the sweep stops there and never runs 2000.
    run = Run(server, "http", "--sweep", "2,1000,2000", "--constant", "--num-requests", "8",
              "--input-len", "8", "--output-len", "8", "--saturation-throughput", "0.75", tmp=tmp)
    check_metrics_present(run)
    check_counts(run)
    sweep = run.json["sweep"]
    assert [p["load"] for p in sweep] == [2, 1000], sweep
    assert not sweep[0]["saturated"] and sweep[1]["saturated"], sweep
    assert "offered" in sweep[1]["saturation_reason"], sweep[1]
    assert "Sweep (open)" in run.stdout


def case_multi_turn(server, tmp):
    prompts = os.path.join(tmp, "prompts.jsonl")
    with open(prompts, "w") as f:
        f.write(json.dumps({"messages": [{"role": "system", "content": "Be brief."},
                                         {"role": "user", "content": "Who goes there?"}]}) + "\n")
        f.write(json.dumps({"prompt": "Speak of the king."}) + "\n")
        f.write(json.dumps({"prompt": "And the queen?"}) + "\n")
    for protocol in ("http", "grpc"):
        run = Run(server, protocol, "--turns", "3", "--concurrency", "2", "--num-requests", "12",
                  "--output-len", "8", "--prompts", prompts, tmp=tmp, name=f"turns_{protocol}")
        check_metrics_present(run)
        check_counts(run)
        by_conv = {}
        for r in run.requests():
            by_conv.setdefault(r["conversation"], []).append(r)
        assert len(by_conv) == 4, by_conv.keys()
        for conv in by_conv.values():
            conv.sort(key=lambda r: r["turn"])
            assert [r["turn"] for r in conv] == [0, 1, 2], conv
            # Each turn sends the history: prompts grow by at least the previous answer.
            for a, b in zip(conv, conv[1:]):
                assert b["prompt_tokens"] > a["prompt_tokens"] + a["output_tokens"], (a, b)
                assert b["start_s"] >= a["end_s"], (a, b)
            # The history each turn re-sends comes from the server's prefix cache.
            assert conv[2]["cached_tokens"] > 0, conv
        turns = run.json["phases"][0]["summary"]["turns"]
        assert [t["turn"] for t in turns] == [0, 1, 2], turns
        assert turns[2]["cached_tokens"] > 0 and turns[2]["ttft_s"]["count"] == 4, turns[2]
        assert "TTFT by turn" in run.stdout


def case_shared_prefix(server, tmp):
    # Groups of requests with a common system prompt (SGLang's generated-shared-prefix): the
    # server's prefix cache serves the prompt of every request but each group's first ones.
    for protocol in ("http", "grpc"):
        run = Run(server, protocol, "--shared-prefix-groups", "2", "--shared-prefix-len", "64",
                  "--input-len", "8", "--output-len", "4", "--concurrency", "1", "--num-requests", "12",
                  tmp=tmp, name=f"shared_{protocol}")
        check_metrics_present(run)
        check_counts(run)
        s = run.json["phases"][0]["summary"]
        delta = run.json["phases"][0]["server"]
        assert s["cached_tokens"] > 0 and s["prefix_cache_hit_rate"] > 0.5, s
        # Without preemptions each request is looked up once: the client's usage figures add up
        # to the server's counters.
        assert delta["prefix_cache_hits"] == s["cached_tokens"] == run.delta("rill_prefix_cache_hits_total"), \
            (delta, s["cached_tokens"])
        assert delta["prefix_cache_queries"] == s["input_tokens"], (delta, s["input_tokens"])
        groups = {r["group"] for r in run.requests()}
        assert groups == {0, 1}, groups
        for r in run.requests():
            assert 0 <= r["cached_tokens"] < r["prompt_tokens"], r
        assert "Prompt tokens from the prefix cache" in run.stdout
        assert run.csv[0]["cached_tokens"] != "", run.csv[0]


def case_streaming_cache(server, tmp):
    # 600 tokens each, past the default model's 512-token context, in a 4 + 64 token cache.
    # Synthetic prompts share no prefix: nothing comes from the prefix cache.
    run = Run(server, "grpc", "--cache", "streaming", "--sink", "4", "--window", "64",
              "--concurrency", "2", "--num-requests", "2", "--input-len", "16", "--output-len", "600",
              tmp=tmp)
    check_metrics_present(run)
    check_counts(run)
    assert all(r["output_tokens"] == 600 and r["finish_reason"] == "length" for r in run.requests())
    evicted = run.json["phases"][0]["server"]["evicted_tokens"]
    assert evicted > 2 * (600 - 64) * 0.9, evicted
    assert run.delta("rill_kv_evicted_tokens_total") == evicted
    assert run.json["phases"][0]["summary"]["cached_tokens"] == 0


def case_cancel(server, tmp):
    prompts = os.path.join(tmp, "prompts.txt")
    with open(prompts, "w") as f:
        f.write("ROMEO:\n\nJULIET:\nFirst Citizen:\n")
    for protocol in ("http", "grpc"):
        run = Run(server, protocol, "--cancel-fraction", "0.5", "--concurrency", "8",
                  "--num-requests", "24", "--output-len", "64", "--prompts", prompts, tmp=tmp,
                  name=f"cancel_{protocol}")
        check_metrics_present(run)
        check_counts(run)
        s = run.json["phases"][0]["summary"]
        assert 3 <= s["cancelled"] <= 21, s["cancelled"]
        assert run.delta("rill_requests_total", finished_reason="cancelled") == s["cancelled"]
        names = {c["name"]: c["passed"] for c in run.json["phases"][0]["checks"]}
        assert names.get("requests_cancelled") and names.get("running_back_to_baseline"), names
        for r in run.requests():
            if r["cancelled"]:
                assert 1 <= r["output_tokens"] < 64, r


def png_colors(path):
    """The number of distinct pixel values of an 8-bit PNG (decoded here: no imaging library)."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat = 8, b""
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and interlace == 0, (depth, interlace)
            bpp = {0: 1, 2: 3, 4: 2, 6: 4}[color]
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * bpp
    prev = bytearray(stride)
    colors = set()
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):  # PNG's five scanline filters, undone
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], (prev[i - bpp] if i >= bpp else 0)
            if kind == 1:
                line[i] = (line[i] + a) & 255
            elif kind == 2:
                line[i] = (line[i] + b) & 255
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        if y % 4 == 0:  # every fourth row is plenty to tell a drawn page from a blank one
            colors.update(bytes(line[i:i + bpp]) for i in range(0, stride, bpp * 2))
        prev = line
    return len(colors)


def case_html_report(server, tmp):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        print("SKIP: chromium is not installed (scripts/install_deps.sh installs it on Debian)")
        return SKIP
    html = os.path.join(tmp, "report.html")
    run = Run(server, "grpc", "--sweep", "1,4", "--concurrency", "1", "--num-requests", "8",
              "--turns", "2", "--output-len", "16", "--html", html, tmp=tmp)
    check_metrics_present(run)
    check_counts(run)
    with open(html) as f:
        page = f.read()
    # Self-contained: outside the embedded data (which quotes the command line) nothing refers to
    # another resource; the one URI is the SVG namespace, which is a name, never fetched.
    data_start = page.index('<script type="application/json" id="rill-data">')
    code = page[:data_start] + page[page.index("</script>", data_start):]
    code = code.replace('"http://www.w3.org/2000/svg"', "")
    for ref in ("http:", "https:", "src=", "href=", "url(", "@import", "fetch(", "XMLHttpRequest"):
        assert ref not in code, f"external reference {ref}"
    base = [chromium, "--headless", "--disable-gpu", "--no-sandbox", "--enable-logging=stderr",
            "--v=0", "--virtual-time-budget=5000"]
    dom = subprocess.run(base + ["--dump-dom", "file://" + html], capture_output=True, text=True,
                         timeout=120)
    assert dom.returncode == 0, dom.stderr
    console = [line for line in dom.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert not any("Uncaught" in line or "Error" in line for line in console), console
    out = dom.stdout
    assert 'data-rendered="true"' in out, "the report's script did not finish"
    assert 'data-errors=' not in out, "the report's script raised an error"
    for chart in ("chart-sweep", "chart-ttft", "chart-tpot", "chart-itl", "chart-latency-time",
                  "chart-throughput-time", "chart-ttft-turn", "chart-cached-turn"):
        start = out.find(f'id="{chart}"')
        assert start >= 0, f"no {chart}"
        svg = out[out.rfind("<svg", 0, start):out.find("</svg>", start)]
        points = int(svg.split('data-points="')[1].split('"')[0])
        paths = svg.count('class="series"')
        assert points > 0 and paths > 0, (chart, points, paths)
        assert " d=\"M" in svg, f"{chart} has no drawn path"
    assert out.count('class="point"') >= 6  # 3 sweep series x 2 points
    png = os.path.join(tmp, "report.png")
    shot = subprocess.run(base + ["--window-size=1000,900", f"--screenshot={png}", "file://" + html],
                          capture_output=True, text=True, timeout=120)
    assert shot.returncode == 0 and os.path.exists(png), shot.stderr
    colors = png_colors(png)
    assert colors > 20, f"the screenshot looks blank ({colors} colors)"


def case_concurrency_1000(server, tmp):
    run = Run(server, "http", "--concurrency", "1000", "--num-requests", "1000", "--input-len", "4",
              "--output-len", "4", tmp=tmp, sample_threads=True)
    check_metrics_present(run)
    check_counts(run)
    s = run.json["phases"][0]["summary"]
    assert s["completed"] == 1000 and s["failed"] == 0, s
    assert s["max_in_flight"] == 1000, s["max_in_flight"]
    # One process, a handful of threads: no thread per stream.
    print(f"1000 streams in {run.seconds:.1f} s; rill-loadtest threads at most {run.max_threads}")
    assert 0 < run.max_threads <= 16, run.max_threads


def case_streams(server, tmp):
    # Long-lived streams (issue 33) decode while prompts arrive with latency targets; the report
    # has their ITL before and during the arrivals, and the server counted the targets' verdicts.
    for protocol in ("http", "grpc"):
        before = server.metrics()
        run = Run(server, protocol, "--streams", "3", "--stream-prompt-len", "40", "--stream-window", "60",
                  "--stream-settle", "1", "--rate", "4", "--num-requests", "6", "--input-len", "100",
                  "--output-len", "8", "--targets", "ttft:600000,tpot:0", "--html",
                  os.path.join(tmp, f"streams_{protocol}.html"), tmp=tmp, name=f"streams_{protocol}")
        check_metrics_present(run)
        streams = run.json["streams"]
        assert streams["streams"] == 3 and streams["failed"] == 0, streams
        assert streams["itl_before_s"]["count"] > 20 and streams["load_start_s"] - streams["ready_s"] >= 1, streams
        assert len(streams["gaps_before_s"]) == streams["itl_before_s"]["count"]
        during = run.json["phases"][0]["streams"]
        assert during["itl_s"]["count"] > 20 and during["p99_over_steady"] > 0, during
        assert during["itl_all_s"]["count"] > during["itl_s"]["count"], during
        assert run.json["phases"][0]["server"]["itl_p99_s"] > 0
        assert run.json["config"]["targets"] == "ttft:600000,tpot:0"
        assert "Long-lived streams before the load" in run.stdout and "ITL p99 / steady mean" in run.stdout
        # The arrivals finished by length; the streams were cancelled by the client afterwards.
        assert run.delta("rill_requests_total", finished_reason="length") == 6
        assert wait_for_delta(server, before, "rill_requests_total", 3, finished_reason="cancelled")
        # Each arrival met its TTFT target (ten minutes) and had no TPOT target.
        assert run.delta("rill_slo_met_total", kind="ttft") >= 6
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium:  # the streams' chart holds both windows' gaps
        dom = subprocess.run([chromium, "--headless", "--disable-gpu", "--no-sandbox", "--virtual-time-budget=5000",
                              "--dump-dom", "file://" + os.path.join(tmp, "streams_http.html")],
                             capture_output=True, text=True, timeout=120)
        out = dom.stdout
        assert 'data-rendered="true"' in out and "data-errors=" not in out, dom.stderr[-2000:]
        start = out.find('id="chart-streams-itl"')
        assert start >= 0, "no chart-streams-itl"
        svg = out[out.rfind("<svg", 0, start):out.find("</svg>", start)]
        assert 'data-series="2"' in svg and int(svg.split('data-points="')[1].split('"')[0]) > 40, svg[:300]


def wait_for_delta(server, before, name, want, timeout=10, **labels):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if metric_value(server.metrics(), name, **labels) - metric_value(before, name, **labels) >= want:
            return True
        time.sleep(0.1)
    return False


CASES = {
    "http_open": (case_http_open, []),
    "grpc_closed": (case_grpc_closed, []),
    "sweep": (case_sweep, []),
    "multi_turn": (case_multi_turn, []),
    "shared_prefix": (case_shared_prefix, []),
    "streaming_cache": (case_streaming_cache, []),
    "cancel": (case_cancel, []),
    "html_report": (case_html_report, []),
    "concurrency_1000": (case_concurrency_1000, ["--max-queued-requests", "1100"]),
    "streams": (case_streams, []),
}


def main():
    name = sys.argv[1]
    fn, server_args = CASES[name]
    server = Server(*server_args)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            rc = fn(server, tmp)
    finally:
        assert server.stop() == 0
    if rc == SKIP:
        sys.exit(SKIP)
    print(f"rill-loadtest {name}: OK")


if __name__ == "__main__":
    main()
