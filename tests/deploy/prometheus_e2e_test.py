"""The monitoring stack end to end: the real rill-server (CPU, default model, ephemeral loopback
ports) scraped every second by a real Prometheus (Debian's binary) that loads the repository's
recording rules (docker/prometheus/rules.yml). After a handful of streaming completions a TPOT
quantile comes back through Prometheus' HTTP API, by the raw expression and by its recording rule.
Then the Grafana dashboard (docker/grafana/dashboards/rill.json): every query evaluates in that
Prometheus, every metric it names is a family of the server's /metrics, and every family of
/metrics is on the dashboard."""
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import unittest
import urllib.error
import urllib.parse
import urllib.request

SOURCE_DIR = os.environ.get("RILL_SOURCE_DIR", os.path.abspath(os.path.join(os.path.dirname(__file__), "../..")))
sys.path.insert(0, os.path.join(SOURCE_DIR, "tests/server"))
from harness import Server, wait_until  # noqa: E402

PROMETHEUS = os.environ.get("RILL_PROMETHEUS") or shutil.which("prometheus") or "/usr/bin/prometheus"
RULES = os.path.join(SOURCE_DIR, "docker/prometheus/rules.yml")
DASHBOARD = os.path.join(SOURCE_DIR, "docker/grafana/dashboards/rill.json")
SERVED_NAME = "rill-shakespeare"
TPOT_P50 = "histogram_quantile(0.5, sum by (le) (rate(rill_time_per_output_token_seconds_bucket[1m])))"
# Grafana's variables as Prometheus would see them with "All" selected.
GRAFANA_VARS = {"$__rate_interval": "1m", "$__interval": "5s", "$model": ".*", "$instance": ".*"}
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
# Loopback only: never through a proxy from the environment.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
# Every process and directory this test makes; removed if the test itself is terminated
# (ctest's timeout).
_STARTED = []
_WORKDIRS = []


def _kill_started(signum, _frame):
    for proc in _STARTED:
        if proc.poll() is None:
            proc.kill()
    for proc in _STARTED:
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
    for d in _WORKDIRS:
        shutil.rmtree(d, ignore_errors=True)
    os._exit(128 + signum)


signal.signal(signal.SIGTERM, _kill_started)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Prometheus:
    """Prometheus on an ephemeral loopback port with a throw-away TSDB, scraping one target."""

    def __init__(self, target, rules, workdir, timeout=30):
        config = os.path.join(workdir, "prometheus.yml")
        # JSON is YAML: no YAML library needed here.
        with open(config, "w") as f:
            json.dump({"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                       "rule_files": [rules],
                       "scrape_configs": [{"job_name": "rill", "static_configs": [{"targets": [target]}]}]}, f)
        self.log_path = os.path.join(workdir, "prometheus.log")
        self.proc = None
        for _ in range(3):  # the port picked may be taken before Prometheus binds it: try another
            self.port = free_port()
            self.base = f"http://127.0.0.1:{self.port}"
            with open(self.log_path, "w") as log:
                self.proc = subprocess.Popen(
                    [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={os.path.join(workdir, 'data')}",
                     f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
                    cwd=workdir, stdout=log, stderr=subprocess.STDOUT)
            _STARTED.append(self.proc)
            if wait_until(lambda: self.ready() or self.proc.poll() is not None, timeout=timeout) and self.ready():
                return
            self.stop()
        raise RuntimeError(f"prometheus did not become ready:\n{self.log()}")

    def get(self, path, **params):
        url = self.base + path + ("?" + urllib.parse.urlencode(params) if params else "")
        try:
            with _OPENER.open(url, timeout=10) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()
        except (urllib.error.URLError, ConnectionError):
            return None, b""

    def ready(self):
        return self.proc.poll() is None and self.get("/-/ready")[0] == 200

    def query(self, expr):
        """The instant query's result list; raises on a PromQL or HTTP error."""
        status, body = self.get("/api/v1/query", query=expr)
        answer = json.loads(body) if body else {}
        if status != 200 or answer.get("status") != "success":
            raise AssertionError(f"query {expr!r}: HTTP {status} {body[:300]!r}")
        return answer["data"]["result"]

    def scalar(self, expr):
        """The single sample of `expr`, or None while there is none."""
        result = self.query(expr)
        return float(result[0]["value"][1]) if len(result) == 1 else None

    def log(self):
        try:
            with open(self.log_path) as f:
                return f.read()[-4000:]
        except OSError:
            return ""

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def dashboard_queries(dashboard):
    """(panel title, PromQL) for every panel target, rows' nested panels included."""
    out = []

    def walk(panels):
        for p in panels:
            for t in p.get("targets", []):
                if t.get("expr"):
                    out.append((p.get("title", ""), t["expr"]))
            walk(p.get("panels", []))
    walk(dashboard.get("panels", []))
    return out


def template_queries(dashboard):
    out = []
    for v in dashboard.get("templating", {}).get("list", []):
        q = v.get("query")
        q = q.get("query") if isinstance(q, dict) else q
        if v.get("type") == "query" and q:
            out.append((f"variable {v['name']}", q))
    return out


def expand(expr):
    for var, value in GRAFANA_VARS.items():
        expr = expr.replace(var, value)
    return expr


def family(name):
    for suffix in HISTOGRAM_SUFFIXES:
        if name.endswith(suffix):
            return name[:-len(suffix)]
    return name


def metric_families(text):
    return {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")}


def recorded_names(rules_path):
    with open(rules_path) as f:
        return set(re.findall(r"^\s*-?\s*record:\s*(\S+)", f.read(), re.M))


class PrometheusEndToEndTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.workdir = tempfile.mkdtemp(prefix="rill-deploy-")
        _WORKDIRS.append(cls.workdir)
        cls.server = cls.prometheus = None
        try:
            cls.server = Server("--served-model-name", SERVED_NAME)
            _STARTED.append(cls.server.proc)
            cls.prometheus = Prometheus(f"127.0.0.1:{cls.server.http_port}", RULES, cls.workdir)
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        if cls.prometheus:
            cls.prometheus.stop()
        if cls.server:
            cls.server.stop(timeout=30)
        shutil.rmtree(cls.workdir, ignore_errors=True)

    def wait_for(self, what, predicate, timeout=30):
        if not wait_until(predicate, timeout=timeout, interval=0.5):
            self.fail(f"timed out waiting for {what}\nprometheus log:\n{self.prometheus.log()}")

    def stream_completion(self, i):
        body = {"model": SERVED_NAME, "prompt": "ROMEO:" * (i + 1), "max_tokens": 12, "temperature": 0,
                "ignore_eos": True, "stream": True}
        status, raw = self.server.post("/v1/completions", body)
        self.assertEqual(status, 200, raw[:300])
        events = [line[6:] for line in raw.decode().splitlines() if line.startswith("data: ")]
        self.assertEqual(events[-1], "[DONE]")
        self.assertGreater(len(events), 2)

    def test_1_tpot_quantile_through_prometheus(self):
        prom = self.prometheus
        # Two scrapes before the requests, so rate() sees the buckets grow.
        self.wait_for("two scrapes of rill-server",
                      lambda: (prom.scalar('sum(count_over_time(up{job="rill"}[1m]))') or 0) >= 2)
        self.assertEqual(prom.scalar('up{job="rill"}'), 1.0)
        for i in range(6):
            self.stream_completion(i)

        values = {}

        def positive(key, expr):
            v = prom.scalar(expr)
            values[key] = v
            return v is not None and math.isfinite(v) and v > 0
        self.wait_for("a TPOT p50 from Prometheus", lambda: positive("raw", TPOT_P50))
        # The recording rule, with the served model's label.
        rule = "model_name:rill_time_per_output_token_seconds:p50_1m"
        self.wait_for(f"{rule} from the recording rules", lambda: positive("rule", rule))
        result = prom.query(rule)
        self.assertEqual(result[0]["metric"].get("model_name"), SERVED_NAME)
        # TPOT buckets end at 5 s; the tiny model on a CPU is far below.
        self.assertLess(values["raw"], 5.0)
        for name in ("model_name:rill_time_to_first_token_seconds:p99_1m",
                     "model_name:rill_inter_token_latency_seconds:p90_1m"):
            self.wait_for(name, lambda name=name: positive(name, name))

        # Every rule of rules.yml loaded and evaluates without error.
        status, body = prom.get("/api/v1/rules")
        self.assertEqual(status, 200)
        loaded = [r for g in json.loads(body)["data"]["groups"] for r in g["rules"]]
        self.assertEqual({r["name"] for r in loaded}, recorded_names(RULES))
        self.wait_for("every rule evaluated", lambda: all(
            r.get("health") == "ok" for g in json.loads(prom.get("/api/v1/rules")[1])["data"]["groups"]
            for r in g["rules"]))

    def test_2_dashboard_queries_evaluate_and_name_real_metrics(self):
        with open(DASHBOARD) as f:
            dashboard = json.load(f)
        panels = dashboard_queries(dashboard)
        self.assertGreaterEqual(len(panels), 15)
        families = metric_families(self.server.metrics())
        records = recorded_names(RULES)
        named = set()
        for title, expr in panels + template_queries(dashboard):
            for token in re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", expr):
                if ":" in token:  # a recording rule
                    self.assertIn(token, records, f"{title}: {token} is not recorded by rules.yml")
            for name in re.findall(r"rill_[a-z0-9_]+", expr):
                named.add(family(name))
                self.assertIn(family(name), families, f"{title}: {name} is not in rill-server's /metrics")
        for title, expr in panels:  # label_values() of the variables is Grafana's, not PromQL
            try:
                self.prometheus.query(expand(expr))
            except AssertionError as e:
                self.fail(f"panel {title!r}: {e}")
        self.assertEqual(families - named, set(), "metric families with no panel on the dashboard")


if __name__ == "__main__":
    unittest.main()
