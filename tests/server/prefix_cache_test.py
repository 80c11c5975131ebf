"""Prefix caching end to end, with clients Rill did not write: over HTTP the second of two equal
prompts reports usage.prompt_tokens_details.cached_tokens and gives the same text, a different
cache_salt or "prefix_caching": false shares nothing; over gRPC the final usage carries
cached_tokens and GetLoad / GetServerInfo the hit rate; /metrics has the prefix-cache families;
--no-prefix-caching turns it all off."""
import json
import os
import sys
import unittest

import grpc

sys.path.insert(0, os.path.dirname(__file__))
from harness import Server, metric_value  # noqa: E402
from grpc_api_test import Stub, pb  # noqa: E402

PROMPT = list(range(5, 105))  # 100 token ids: 6 whole blocks of 16 before the last token


def completion(server, **extra):
    body = {"prompt": PROMPT, "max_tokens": 8, "temperature": 0, "ignore_eos": True, **extra}
    status, raw = server.post("/v1/completions", body)
    assert status == 200, raw[:300]
    reply = json.loads(raw)
    return reply["choices"][0]["text"], reply["usage"]


def grpc_generate(stub, salt=""):
    req = pb.GenerateRequest(token_ids=pb.TokenIds(ids=PROMPT), max_tokens=8, ignore_eos=True, cache_salt=salt)
    req.sampling.temperature = 0
    ids, final = [], None
    for msg in stub.Generate(req, timeout=120):
        ids.extend(msg.token_ids)
        if msg.HasField("final"):
            final = msg.final
    return ids, final


class PrefixCacheTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server()
        cls.channel = grpc.insecure_channel(f"127.0.0.1:{cls.server.grpc_port}",
                                            options=[("grpc.enable_http_proxy", 0)])
        cls.stub = Stub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        assert cls.server.stop() == 0

    def test_http_usage_salt_and_opt_out(self):
        text, usage = completion(self.server, cache_salt="http")
        self.assertEqual(usage["prompt_tokens_details"], {"cached_tokens": 0})
        again, usage = completion(self.server, cache_salt="http")
        self.assertEqual(again, text)
        self.assertEqual(usage["prompt_tokens_details"]["cached_tokens"], 96)
        self.assertEqual(usage["prompt_tokens"], 100)
        other, usage = completion(self.server, cache_salt="another tenant")
        self.assertEqual(other, text)
        self.assertEqual(usage["prompt_tokens_details"]["cached_tokens"], 0)
        _, usage = completion(self.server, cache_salt="opted-out", prefix_caching=False)
        _, usage = completion(self.server, cache_salt="opted-out")
        self.assertEqual(usage["prompt_tokens_details"]["cached_tokens"], 0, "the opted-out request left nothing")
        # Streamed with include_usage: the usage chunk carries the details too.
        body = {"prompt": PROMPT, "max_tokens": 4, "temperature": 0, "cache_salt": "http", "stream": True,
                "stream_options": {"include_usage": True}}
        status, raw = self.server.post("/v1/completions", body)
        self.assertEqual(status, 200)
        events = [line[6:] for line in raw.decode().splitlines() if line.startswith("data: ")]
        self.assertEqual(json.loads(events[-2])["usage"]["prompt_tokens_details"]["cached_tokens"], 96)
        # Chat: a conversation re-sent with one more turn starts from the cached history.
        messages = [{"role": "user", "content": "Speak of the king and of the crown " * 8}]
        chat = {"messages": messages, "max_tokens": 6, "temperature": 0, "cache_salt": "chat"}
        status, raw = self.server.post("/v1/chat/completions", chat)
        self.assertEqual(status, 200, raw[:300])
        reply = json.loads(raw)["choices"][0]["message"]
        chat["messages"] = messages + [reply, {"role": "user", "content": "And then?"}]
        status, raw = self.server.post("/v1/chat/completions", chat)
        self.assertEqual(status, 200, raw[:300])
        self.assertGreater(json.loads(raw)["usage"]["prompt_tokens_details"]["cached_tokens"], 0)

    def test_grpc_usage_load_and_server_info(self):
        ids, final = grpc_generate(self.stub, "grpc")
        self.assertEqual(final.usage.cached_tokens, 0)
        again, final = grpc_generate(self.stub, "grpc")
        self.assertEqual(again, ids)
        self.assertEqual(final.usage.cached_tokens, 96)
        load = self.stub.GetLoad(pb.GetLoadRequest(), timeout=10)
        self.assertGreater(load.prefix_cache_hits, 0)
        self.assertLessEqual(load.prefix_cache_hits, load.prefix_cache_queries)
        self.assertAlmostEqual(load.prefix_cache_hit_rate, load.prefix_cache_hits / load.prefix_cache_queries)
        self.assertGreater(load.kv_blocks_cached, 0)
        info = self.stub.GetServerInfo(pb.GetServerInfoRequest(), timeout=10)
        self.assertTrue(info.prefix_caching)
        self.assertGreater(info.prefix_cache_hit_rate, 0)
        with self.assertRaises(grpc.RpcError) as e:
            grpc_generate(self.stub, "s" * 1025)
        self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("cache_salt", e.exception.details())

    def test_metrics(self):
        completion(self.server, cache_salt="metrics")
        completion(self.server, cache_salt="metrics")
        m = self.server.metrics()
        for family in ("rill_prefix_cache_queries_total", "rill_prefix_cache_hits_total",
                       "rill_prefix_cache_evictions_total", "rill_prefix_cache_blocks"):
            self.assertIn(f"# TYPE {family} ", m)
        self.assertGreaterEqual(metric_value(m, "rill_prefix_cache_hits_total"), 96)
        self.assertGreater(metric_value(m, "rill_prefix_cache_blocks"), 0)


class PrefixCacheOffTest(unittest.TestCase):
    def test_no_prefix_caching(self):
        server = Server("--no-prefix-caching")
        try:
            text, usage = completion(server)
            again, usage = completion(server)
            self.assertEqual(again, text)
            self.assertEqual(usage["prompt_tokens_details"]["cached_tokens"], 0)
            m = server.metrics()
            self.assertEqual(metric_value(m, "rill_prefix_cache_queries_total"), 0)
            channel = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}", options=[("grpc.enable_http_proxy", 0)])
            info = Stub(channel).GetServerInfo(pb.GetServerInfoRequest(), timeout=10)
            channel.close()
            self.assertFalse(info.prefix_caching)
        finally:
            self.assertEqual(server.stop(), 0)


if __name__ == "__main__":
    unittest.main()
