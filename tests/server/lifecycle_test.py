"""rill-server's life: invalid configuration is refused at start naming the field; overload answers
503 + Retry-After (HTTP) and RESOURCE_EXHAUSTED + retry-after-ms (gRPC); SIGTERM lets in-flight
streams finish, refuses new requests, cancels what outlives the drain timeout, and exits 0."""
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from harness import SERVER, SOURCE_DIR, Server, metric_value, wait_until  # noqa: E402

STREAMING = {"policy": "streaming", "n_sink": 4, "window": 64}


def open_stream(port, body):
    """Starts a streaming completion; returns (connection, response)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    conn.request("POST", "/v1/completions", body=json.dumps({**body, "stream": True}),
                 headers={"Content-Type": "application/json"})
    return conn, conn.getresponse()


def send_only(port, body):
    """Sends a completion request without waiting for any answer; returns the socket."""
    s = socket.create_connection(("127.0.0.1", port))
    data = json.dumps(body).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)
    return s


def read_events(resp):
    events = []
    for raw in resp:
        line = raw.decode().strip()
        if line.startswith("data: "):
            events.append(line[6:])
            if line == "data: [DONE]":
                break
    return events


def finish_reason(events):
    for e in events:
        if e != "[DONE]":
            for c in json.loads(e).get("choices", []):
                if c.get("finish_reason"):
                    return c["finish_reason"]
    return None


class ConfigTest(unittest.TestCase):
    def run_server(self, *args):
        return subprocess.run([SERVER, *args], cwd=SOURCE_DIR, capture_output=True, text=True, timeout=60)

    def test_invalid_values_name_the_field(self):
        for args, field in [(["--http-port", "99999"], "http_port"), (["--device", "tpu"], "engine.device"),
                            (["--block-size", "3"], "engine.block_size"), (["--max-num-seqs", "0"],
                                                                          "scheduler.max_num_seqs"),
                            (["--http-port", "abc"], "http-port")]:
            with self.subTest(args=args):
                r = self.run_server(*args)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn(field, r.stderr)
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            f.write('{"scheduler": {"max_window": -5}}')
        r = self.run_server("--config", f.name)
        os.unlink(f.name)
        self.assertEqual(r.returncode, 2)
        self.assertIn("scheduler.max_window", r.stderr)

    def test_settings_past_their_maximum_exit_2_naming_the_field(self):
        # 9.3e12 ms passed validation and wrapped the clock: every request ended "deadline" with
        # no text, or every session expired at once. 0 queued requests refused everything.
        for args, message in [
                (["--queue-timeout-ms", "9300000000000"], "scheduler.queue_timeout_ms: must be in [1, 2592000000]"),
                (["--session-idle-ttl-ms", "9300000000000"], "scheduler.session_idle_ttl_ms"),
                (["--stall-timeout-ms", "0"], "scheduler.stall_timeout_ms"),
                (["--max-queued-requests", "0"], "scheduler.max_queued_requests: must be in [1, "),
                (["--cpu-kv-cache-bytes", "9223372036854775807"],
                 "engine.cpu_kv_cache_bytes: must be in [1, 1099511627776] (got 9223372036854775807)"),
                (["--max-connections", "0"], "max_connections"),
                (["--max-buffered-body-bytes", "4096"], "max_buffered_body_bytes: must be at least max_body_bytes"),
                (["--max-stream-buffer-bytes", str(1 << 40)], "max_stream_buffer_bytes"),
                (["--host", "localhost"], "host: must be an IPv4 or IPv6 address"),
                (["--served-model-name", "a\x01b"], "served_model_name")]:
            with self.subTest(args=args):
                r = self.run_server(*args)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn(message, r.stderr)

    def test_config_that_is_not_a_file_exits_2_naming_it(self):
        with tempfile.TemporaryDirectory() as d:
            r = self.run_server("--config", d)  # aborted with an uncaught std::ios_failure
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(f"config {d}: is a directory", r.stderr)
            r = self.run_server("--config", os.path.join(d, "missing.json"))
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("missing.json: no such file", r.stderr)

    def test_every_startup_failure_exits_2_naming_the_file_or_field(self):
        common = ["--host", "127.0.0.1", "--grpc-port", "0", "--device", "cpu"]
        r = self.run_server(*common, "--http-port", "0", "--model", "/nonexistent/model")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("model: cannot load /nonexistent/model", r.stderr)
        with socket.socket() as busy:
            busy.bind(("127.0.0.1", 0))
            busy.listen(1)
            r = self.run_server(*common, "--http-port", str(busy.getsockname()[1]))
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("http_port: cannot listen on 127.0.0.1:", r.stderr)

    def test_help(self):
        r = self.run_server("--help")
        self.assertEqual(r.returncode, 0)
        self.assertIn("--grpc-port", r.stdout)
        for flag in ("--max-connections", "--max-buffered-body-bytes"):
            self.assertIn(flag, r.stdout)
        self.assertIn("[1, 2592000000]", r.stdout)


class StartupOutputTest(unittest.TestCase):
    def test_event_lines_are_json_and_the_log_shows_the_values_in_force(self):
        name = 'we"ird\\name'
        server = Server("--served-model-name", name, "--log-level", "info")
        try:
            # The ready line was printf'd unescaped: invalid JSON.
            self.assertTrue(wait_until(lambda: "ready" in server.events, timeout=30))
            self.assertEqual(server.events["ready"]["model"], name)
            self.assertEqual(json.loads(server.get("/v1/models")[1])["data"][0]["id"], name)
            log = "".join(server.stdout_lines)
            # The start line printed the generic scheduler limits (256 sequences, 8192 tokens a
            # step) the CPU runner then did not use; the values in force follow the runner.
            start = next(line for line in server.stdout_lines if " config {" in line)
            self.assertNotIn("max_num_seqs", start)
            self.assertIn('scheduler in force (cpu runner): {', log)
            self.assertIn('"max_num_seqs":64', log)
            self.assertIn('"max_num_batched_tokens":512', log)
        finally:
            self.assertEqual(server.stop(), 0)


class OverloadTest(unittest.TestCase):
    def test_queue_full(self):
        server = Server("--max-num-seqs", "1", "--max-queued-requests", "1")
        try:
            body = {"prompt": "ROMEO:", "max_tokens": 100000, "ignore_eos": True, "cache": STREAMING}
            running = send_only(server.http_port, body)
            self.assertTrue(wait_until(lambda: metric_value(server.metrics(), "rill_requests_running") == 1))
            queued = send_only(server.http_port, body)
            self.assertTrue(wait_until(lambda: metric_value(server.metrics(), "rill_requests_waiting") == 1))
            status, raw = server.post("/v1/completions", {"prompt": "x", "max_tokens": 1})
            self.assertEqual(status, 503, raw)
            self.assertEqual(json.loads(raw)["error"]["type"], "overloaded_error")
            conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=30)
            conn.request("POST", "/v1/completions", body='{"prompt": "x"}')
            r = conn.getresponse()
            self.assertEqual(r.status, 503)
            self.assertGreaterEqual(int(r.getheader("Retry-After")), 1)
            conn.close()
            # gRPC: RESOURCE_EXHAUSTED with the retry hint in the trailing metadata.
            import grpc
            from grpc_api_test import Stub, greedy
            with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}",
                                       options=[("grpc.enable_http_proxy", 0)]) as channel:
                with self.assertRaises(grpc.RpcError) as e:
                    list(Stub(channel).Generate(greedy(text="x", max_tokens=1), timeout=30))
                self.assertEqual(e.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
                trailers = dict(e.exception.trailing_metadata())
                self.assertGreater(int(trailers["retry-after-ms"]), 0)
            for c in (running, queued):
                c.close()
        finally:
            self.assertEqual(server.stop(), 0)


class DrainTest(unittest.TestCase):
    def test_in_flight_stream_finishes(self):
        server = Server("--drain-timeout", "60")
        self.addCleanup(server.kill)  # a failure before the server's own exit leaves none running
        conn, resp = open_stream(server.http_port, {"prompt": "ROMEO:", "max_tokens": 300, "ignore_eos": True,
                                                    "temperature": 0})
        first = resp.readline()
        self.assertTrue(first)
        import grpc
        channel = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}", options=[("grpc.enable_http_proxy", 0)])
        check = channel.unary_unary("/grpc.health.v1.Health/Check")
        self.assertEqual(check(b"", timeout=10), b"\x08\x01")  # SERVING
        server.proc.send_signal(signal.SIGTERM)
        # New requests are refused (503) or find the listener closed; gRPC health says NOT_SERVING.
        time.sleep(0.3)
        status, _ = server.get("/health")
        self.assertIn(status, (503, None))
        try:
            self.assertEqual(check(b"", timeout=10), b"\x08\x02")  # NOT_SERVING
        except grpc.RpcError as e:
            self.assertEqual(e.code(), grpc.StatusCode.UNAVAILABLE)  # already shut down
        channel.close()
        events = read_events(resp)
        self.assertEqual(events[-1], "[DONE]")
        self.assertEqual(finish_reason(events), "length")
        self.assertEqual(server.proc.wait(timeout=60), 0)

    def test_drain_timeout_cancels(self):
        server = Server("--drain-timeout", "1")
        self.addCleanup(server.kill)
        conn, resp = open_stream(server.http_port, {"prompt": "ROMEO:", "max_tokens": 10 ** 6, "ignore_eos": True,
                                                    "cache": STREAMING})
        self.assertTrue(resp.readline())
        started = time.time()
        server.proc.send_signal(signal.SIGTERM)
        events = read_events(resp)
        self.assertIn(finish_reason(events), ("cancelled", None))
        self.assertEqual(server.proc.wait(timeout=60), 0)
        self.assertLess(time.time() - started, 30)


if __name__ == "__main__":
    unittest.main(verbosity=2)
