"""Starts the real rill-server on ephemeral loopback ports for end-to-end tests.

The server prints a machine-readable line {"event": "listening", "http_port": N, "grpc_port": M}
on stdout; the harness reads it, waits for /health to answer 200 and stops the server with
SIGTERM at the end (checking that it exits 0)."""
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

SOURCE_DIR = os.environ.get("RILL_SOURCE_DIR", os.path.abspath(os.path.join(os.path.dirname(__file__), "../..")))
# Loopback only: never through a proxy from the environment.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
SERVER = os.environ.get("RILL_SERVER", os.path.join(SOURCE_DIR, "build/server/rill-server"))
# Seconds a request may take: the sanitized server (scripts/test_asan.sh) runs several times
# slower, and a structured-output request with a fresh schema under 8 concurrent clients took over
# 60 s there on a 2-core machine.
REQUEST_TIMEOUT = 240 if os.environ.get("RILL_SANITIZED") == "1" else 60


class Server:
    """`events`: the machine-readable lines by name ("listening", "ready"); `stdout_lines`: every
    line the server wrote on stdout (its log included). `preexec_fn` runs in the child before exec
    (e.g. to lower its RLIMIT_NOFILE)."""

    def __init__(self, *extra_args, startup_timeout=120, preexec_fn=None):
        args = [SERVER, "--host", "127.0.0.1", "--http-port", "0", "--grpc-port", "0", "--device", "cpu",
                "--log-level", "warn", *extra_args]
        self.proc = subprocess.Popen(args, cwd=SOURCE_DIR, stdout=subprocess.PIPE, stderr=sys.stderr, text=True,
                                     errors="replace", preexec_fn=preexec_fn)
        self.http_port = self.grpc_port = None
        self.stdout_lines = []
        deadline = time.time() + startup_timeout
        line_holder = self.events = {}

        def read_stdout():
            for line in self.proc.stdout:
                self.stdout_lines.append(line)
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                if isinstance(event, dict) and "event" in event:
                    line_holder[event["event"]] = event

        threading.Thread(target=read_stdout, daemon=True).start()
        while "listening" not in line_holder:
            if self.proc.poll() is not None:
                raise RuntimeError(f"rill-server exited with {self.proc.returncode} before listening")
            if time.time() > deadline:
                self.kill()
                raise RuntimeError("rill-server did not print its ports in time")
            time.sleep(0.05)
        self.http_port = line_holder["listening"]["http_port"]
        self.grpc_port = line_holder["listening"]["grpc_port"]
        self.base = f"http://127.0.0.1:{self.http_port}"
        while True:
            status, _ = self.get("/health")
            if status == 200:
                break
            if time.time() > deadline or self.proc.poll() is not None:
                self.kill()
                raise RuntimeError(f"rill-server not healthy in time (last /health: {status})")
            time.sleep(0.1)

    def request(self, method, path, body=None, headers=None, timeout=REQUEST_TIMEOUT):
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method, headers=headers or {})
        if data is not None and "Content-Type" not in (headers or {}):
            req.add_header("Content-Type", "application/json")
        try:
            with _OPENER.open(req, timeout=timeout) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()
        except (urllib.error.URLError, ConnectionError):
            return None, b""

    def get(self, path):
        return self.request("GET", path)

    def post(self, path, body):
        return self.request("POST", path, body)

    def metrics(self):
        status, body = self.get("/metrics")
        assert status == 200, status
        return body.decode()

    def stop(self, timeout=60):
        """SIGTERM; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def thread_count(self):
        return len(os.listdir(f"/proc/{self.proc.pid}/task"))


def metric_value(text, name, **labels):
    """Sum of the samples of `name` whose labels include `labels` (0 when none)."""
    total, found = 0.0, False
    for line in text.splitlines():
        if not line.startswith(name) or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        metric = head.split("{", 1)[0]
        if metric != name:
            continue
        if all(f'{k}="{v}"' in head for k, v in labels.items()):
            total += float(value)
            found = True
    return total if found else 0.0


def golden_case():
    """The default model's greedy continuation of "ROMEO:" from transformers (tests/golden)."""
    with open(os.path.join(SOURCE_DIR, "tests/golden/default_model.json")) as f:
        return json.load(f)["cases"][0]


def still_held(s):
    """True while the server holds `s`, a connection that sent half a request and waits. Anything
    readable on it means the server let it go: a 503 refusal (over the connection cap), end of
    file or a reset. A read that returns bytes is not "still open": a refused holder has its 503
    waiting unread."""
    return not select.select([s], [], [], 0)[0]


def wait_until(predicate, timeout=30, interval=0.1):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
