"""GET /metrics passes `promtool check metrics`, and its counters agree with the requests sent
(requests, prompt and generation tokens, TTFT observations) over HTTP."""
import http.client
import json
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from harness import Server, metric_value  # noqa: E402

FAMILIES = ["rill_time_to_first_token_seconds", "rill_time_per_output_token_seconds",
            "rill_e2e_request_latency_seconds", "rill_request_queue_time_seconds", "rill_prompt_tokens_total",
            "rill_generation_tokens_total", "rill_requests_total", "rill_requests_running",
            "rill_requests_waiting", "rill_kv_cache_usage_ratio"]


class MetricsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server("--served-model-name", 'tiny"model')

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0

    def promtool(self, text):
        r = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
        return r.returncode, r.stdout + r.stderr

    def test_counts_agree_and_promtool_accepts(self):
        before = self.server.metrics()
        n, prompt_tokens, completion_tokens = 6, 0, 0
        for i in range(n):
            body = {"model": 'tiny"model', "prompt": "ROMEO:" * (i + 1), "max_tokens": 3 + i, "temperature": 0,
                    "ignore_eos": True, "stream": i % 2 == 1, "stream_options": {"include_usage": True}}
            status, raw = self.server.post("/v1/completions", body)
            self.assertEqual(status, 200, raw[:300])
            if i % 2 == 0:
                usage = json.loads(raw)["usage"]
            else:
                events = [line[6:] for line in raw.decode().splitlines() if line.startswith("data: ")]
                self.assertEqual(events[-1], "[DONE]")
                usage = json.loads(events[-2])["usage"]
            prompt_tokens += usage["prompt_tokens"]
            completion_tokens += usage["completion_tokens"]
            self.assertEqual(usage["completion_tokens"], 3 + i)
        after = self.server.metrics()
        code, out = self.promtool(after)
        self.assertEqual(code, 0, out)
        for family in FAMILIES:
            self.assertIn(f"# TYPE {family} ", after)

        def delta(name, **labels):
            return metric_value(after, name, **labels) - metric_value(before, name, **labels)
        self.assertEqual(delta("rill_requests_total"), n)
        self.assertEqual(delta("rill_requests_total", finished_reason="length"), n)
        self.assertEqual(delta("rill_prompt_tokens_total"), prompt_tokens)
        self.assertEqual(delta("rill_generation_tokens_total"), completion_tokens)
        self.assertEqual(delta("rill_time_to_first_token_seconds_count"), n)
        self.assertEqual(delta("rill_e2e_request_latency_seconds_count"), n)
        self.assertIn('model_name="tiny\\"model"', after)

    def test_content_type(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.server.http_port, timeout=30)
        conn.request("GET", "/metrics")
        r = conn.getresponse()
        r.read()
        self.assertTrue(r.getheader("Content-Type").startswith("text/plain; version=0.0.4"))
        conn.close()


if __name__ == "__main__":
    unittest.main(verbosity=2)
