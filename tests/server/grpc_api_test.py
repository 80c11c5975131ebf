"""End-to-end tests of the rill.v1 gRPC API with Python grpcio (a client Rill did not write):
greedy output against the transformers golden ids, Cancel, client cancellation during prefill and
decode (KV blocks back to baseline in GetLoad), errors, info methods, health and reflection. Also
who may cancel what (issue 27): a client-given request id only from its own connection, a
server-assigned id (HTTP's too) by whoever holds it; server-assigned ids are 128 random bits."""
import http.client
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import grpc

sys.path.insert(0, os.path.dirname(__file__))
from harness import SOURCE_DIR, Server, golden_case, wait_until  # noqa: E402

# Python message classes generated at test time with protoc (no grpc_tools needed: the service
# stubs are four lines of channel.unary_* below).
_GEN = tempfile.mkdtemp(prefix="rill_pb_")
subprocess.check_call(["protoc", f"--proto_path={SOURCE_DIR}/proto", f"--python_out={_GEN}",
                       f"{SOURCE_DIR}/proto/rill/v1/rill.proto"])
sys.path.insert(0, _GEN)
from rill.v1 import rill_pb2 as pb  # noqa: E402


class Stub:
    def __init__(self, channel):
        def unary(name, req, resp):
            return channel.unary_unary(f"/rill.v1.Rill/{name}", request_serializer=req.SerializeToString,
                                       response_deserializer=resp.FromString)
        self.Generate = channel.unary_stream("/rill.v1.Rill/Generate",
                                             request_serializer=pb.GenerateRequest.SerializeToString,
                                             response_deserializer=pb.GenerateResponse.FromString)
        self.Cancel = unary("Cancel", pb.CancelRequest, pb.CancelResponse)
        self.Tokenize = unary("Tokenize", pb.TokenizeRequest, pb.TokenizeResponse)
        self.Detokenize = unary("Detokenize", pb.DetokenizeRequest, pb.DetokenizeResponse)
        self.GetModelInfo = unary("GetModelInfo", pb.GetModelInfoRequest, pb.GetModelInfoResponse)
        self.GetServerInfo = unary("GetServerInfo", pb.GetServerInfoRequest, pb.GetServerInfoResponse)
        self.GetLoad = unary("GetLoad", pb.GetLoadRequest, pb.GetLoadResponse)


def streaming_greedy(**kw):
    """A greedy request that runs until cancelled (a streaming cache never fills the context)."""
    req = greedy(max_tokens=100000, ignore_eos=True, **kw)
    req.cache.kind = pb.CachePolicy.KIND_STREAMING
    req.cache.n_sink = 4
    req.cache.window = 64
    return req


def finish_reason(stream):
    for msg in stream:
        if msg.HasField("final"):
            return msg.final.finish_reason
    return None


def greedy(**kw):
    req = pb.GenerateRequest(**kw)
    req.sampling.temperature = 0
    return req


class GrpcApiTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server()
        cls.channel = grpc.insecure_channel(f"127.0.0.1:{cls.server.grpc_port}",
                                            options=[("grpc.keepalive_time_ms", 30000), ("grpc.enable_http_proxy", 0)])
        cls.stub = Stub(cls.channel)
        cls.baseline = cls.stub.GetLoad(pb.GetLoadRequest(), timeout=10)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        assert cls.server.stop() == 0, "rill-server did not exit 0 on SIGTERM"

    def assert_back_to_baseline(self):
        def idle():
            load = self.stub.GetLoad(pb.GetLoadRequest(), timeout=10)
            return load.running == 0 and load.waiting == 0 and load.kv_blocks_used == self.baseline.kv_blocks_used
        self.assertTrue(wait_until(idle, timeout=30), str(self.stub.GetLoad(pb.GetLoadRequest())))

    def collect(self, req, timeout=120):
        ids, text, final, rid = [], "", None, None
        for msg in self.stub.Generate(req, timeout=timeout):
            rid = rid or msg.request_id
            ids += list(msg.token_ids)
            text += msg.text
            if msg.HasField("final"):
                final = msg.final
        return ids, text, final, rid

    def test_greedy_text_matches_transformers(self):
        case = golden_case()
        n = 40
        tok = self.stub.Tokenize(pb.TokenizeRequest(text=case["prompt"], add_special_tokens=True))
        self.assertEqual(list(tok.token_ids), case["prompt_ids"])
        ids, text, final, rid = self.collect(greedy(text=case["prompt"], max_tokens=n, ignore_eos=True))
        self.assertEqual(ids, case["greedy_ids"][:n])
        expected = self.stub.Detokenize(pb.DetokenizeRequest(token_ids=case["greedy_ids"][:n],
                                                             skip_special_tokens=True)).text
        self.assertEqual(text, expected)
        self.assertTrue(rid)
        self.assertEqual(final.finish_reason, "length")
        self.assertEqual(final.usage.prompt_tokens, len(case["prompt_ids"]))
        self.assertEqual(final.usage.completion_tokens, n)
        self.assertGreaterEqual(final.timings.e2e_s, final.timings.ttft_s)
        self.assertGreater(final.timings.ttft_s, 0)

    def test_token_ids_input_and_logprobs(self):
        case = golden_case()
        req = greedy(token_ids=pb.TokenIds(ids=case["prompt_ids"]), max_tokens=8, logprobs=3)
        ids, n_lp = [], 0
        for msg in self.stub.Generate(req, timeout=60):
            base = len(ids)
            ids += list(msg.token_ids)
            self.assertEqual(len(msg.logprobs), len(msg.token_ids))
            for i, lp in enumerate(msg.logprobs):
                n_lp += 1
                self.assertLessEqual(lp.logprob, 0.0)
                self.assertEqual(len(lp.top), 2)
                self.assertEqual(lp.top[0].token_id, case["greedy_ids"][base + i])  # greedy: the top one
        self.assertEqual(ids, case["greedy_ids"][:8])
        self.assertEqual(n_lp, 8)

    def test_chat_messages(self):
        req = greedy(messages=pb.ChatMessages(messages=[pb.ChatMessage(role="user", content="Speak.")]),
                     max_tokens=5)
        ids, _, final, _ = self.collect(req)
        self.assertEqual(final.finish_reason in ("length", "stop"), True)
        self.assertLessEqual(len(ids), 5)

    def test_stop_string(self):
        case = golden_case()
        full_text = self.stub.Detokenize(pb.DetokenizeRequest(token_ids=case["greedy_ids"][:30])).text
        stop = full_text[10:14]
        _, text, final, _ = self.collect(greedy(text=case["prompt"], max_tokens=30, stop=[stop]))
        self.assertEqual(final.finish_reason, "stop")
        self.assertEqual(final.stop_string, stop)
        self.assertEqual(text, full_text[:full_text.index(stop)])

    def test_cancel_rpc_during_decode(self):
        req = greedy(text="ROMEO:", max_tokens=100000, request_id="cancel-me")
        req.cache.kind = pb.CachePolicy.KIND_STREAMING
        req.cache.n_sink = 4
        req.cache.window = 64
        stream = self.stub.Generate(req, timeout=120)
        first = next(stream)
        self.assertEqual(first.request_id, "cancel-me")
        self.assertTrue(self.stub.Cancel(pb.CancelRequest(request_id="cancel-me")).found)
        final = None
        for msg in stream:
            if msg.HasField("final"):
                final = msg.final
        self.assertEqual(final.finish_reason, "cancelled")
        # Once finished the id is no longer live (the engine forgets it soon after the final event).
        self.assertTrue(wait_until(lambda: not self.stub.Cancel(pb.CancelRequest(request_id="cancel-me")).found))
        self.assert_back_to_baseline()

    def other_client(self):
        """A stub on a connection of its own (not shared through grpc's global subchannel pool)."""
        channel = grpc.insecure_channel(f"127.0.0.1:{self.server.grpc_port}",
                                        options=[("grpc.enable_http_proxy", 0), ("grpc.use_local_subchannel_pool", 1)])
        self.addCleanup(channel.close)
        return Stub(channel)

    def test_client_given_ids_are_cancelled_only_from_their_connection(self):
        # Regression (issue 27): any client could Cancel any request by its id.
        other = self.other_client()
        mine = self.stub.Generate(streaming_greedy(text="ROMEO:", request_id="mine"), timeout=120)
        self.assertEqual(next(mine).request_id, "mine")
        self.assertFalse(other.Cancel(pb.CancelRequest(request_id="mine"), timeout=10).found)
        # The id is the caller's own: another connection may use it at the same time.
        theirs = other.Generate(streaming_greedy(text="JULIET:", request_id="mine"), timeout=120)
        self.assertEqual(next(theirs).request_id, "mine")
        self.assertTrue(other.Cancel(pb.CancelRequest(request_id="mine"), timeout=10).found)
        self.assertEqual(finish_reason(theirs), "cancelled")
        self.assertTrue(next(mine).token_ids)  # still generating
        self.assertTrue(self.stub.Cancel(pb.CancelRequest(request_id="mine"), timeout=10).found)
        self.assertEqual(finish_reason(mine), "cancelled")
        self.assert_back_to_baseline()

    def test_server_assigned_ids_are_cancelled_by_whoever_holds_them(self):
        other = self.other_client()
        stream = self.stub.Generate(streaming_greedy(text="ROMEO:"), timeout=120)
        rid = next(stream).request_id
        self.assertRegex(rid, r"^grpc-[0-9a-f]{32}$")
        self.assertTrue(other.Cancel(pb.CancelRequest(request_id=rid), timeout=10).found)
        self.assertEqual(finish_reason(stream), "cancelled")
        # An HTTP request's X-Request-Id is one too.
        conn = http.client.HTTPConnection("127.0.0.1", self.server.http_port, timeout=120)
        conn.request("POST", "/v1/completions", body=json.dumps({
            "prompt": "ROMEO:", "max_tokens": 100000, "ignore_eos": True, "stream": True,
            "cache": {"policy": "streaming", "n_sink": 4, "window": 64}}), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        self.assertEqual(resp.status, 200)
        rid = resp.getheader("X-Request-Id")
        self.assertRegex(rid, r"^cmpl-[0-9a-f]{32}$")
        self.assertTrue(other.Cancel(pb.CancelRequest(request_id=rid), timeout=10).found)
        reasons = [json.loads(line[6:])["choices"][0]["finish_reason"] for line in
                   (raw.decode().strip() for raw in resp) if line.startswith("data: {")]
        conn.close()
        self.assertEqual(reasons[-1], "cancelled")
        # A guess finds nothing.
        self.assertFalse(other.Cancel(pb.CancelRequest(request_id="cmpl-" + "0" * 32), timeout=10).found)
        self.assert_back_to_baseline()

    def test_server_assigned_ids_look_random(self):
        # Regression (issue 27): ids were a fixed salt and a counter (cmpl-5de702000002e5).
        ids = {"grpc-": [], "cmpl-": [], "chatcmpl-": []}
        for _ in range(40):
            ids["grpc-"].append(next(self.stub.Generate(greedy(text="a", max_tokens=1), timeout=60)).request_id)
        for prefix, path, body in (("cmpl-", "/v1/completions", {"prompt": "a", "max_tokens": 1}),
                                   ("chatcmpl-", "/v1/chat/completions",
                                    {"messages": [{"role": "user", "content": "a"}], "max_tokens": 1})):
            for _ in range(40):
                conn = http.client.HTTPConnection("127.0.0.1", self.server.http_port, timeout=60)
                conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
                r = conn.getresponse()
                r.read()
                ids[prefix].append(r.getheader("X-Request-Id"))
                conn.close()
        everything = []
        for prefix, got in ids.items():
            for rid in got:
                self.assertRegex(rid, "^" + re.escape(prefix) + "[0-9a-f]{32}$")
                everything.append(int(rid[len(prefix):], 16))
        self.assertEqual(len(set(everything)), len(everything))
        # Every one of the 128 bits takes both values (a counter or a salt keeps high bits fixed), and
        # consecutive ids differ in many bits (a counter changes a few low ones).
        ones = zeros = 0
        for v in everything:
            ones |= v
            zeros |= ~v & ((1 << 128) - 1)
        self.assertEqual((ones, zeros), ((1 << 128) - 1, (1 << 128) - 1))
        self.assertGreater(min(bin(a ^ b).count("1") for a, b in zip(everything, everything[1:])), 20)

    def test_request_id_limits(self):
        for rid, what in (("r" * 129, "over the limit of 128"), ("has space", "visible ASCII"),
                          ("new\nline", "visible ASCII")):
            with self.subTest(rid=rid[:20]):
                with self.assertRaises(grpc.RpcError) as e:
                    self.collect(greedy(text="x", max_tokens=1, request_id=rid), timeout=30)
                self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
                self.assertIn(what, e.exception.details())
        with self.assertRaises(grpc.RpcError) as e:
            self.stub.Cancel(pb.CancelRequest(request_id="r" * 100000), timeout=10)
        self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("over the limit of 128", e.exception.details())
        self.assertEqual(self.collect(greedy(text="x", max_tokens=1, request_id="r" * 128))[3], "r" * 128)

    def test_client_cancels_during_decode(self):
        stream = self.stub.Generate(greedy(text="ROMEO:", max_tokens=400, ignore_eos=True), timeout=120)
        next(stream)
        stream.cancel()
        self.assert_back_to_baseline()

    def test_client_cancels_during_prefill(self):
        prompt = (golden_case()["greedy_ids"] * 8)[:500]
        stream = self.stub.Generate(greedy(token_ids=pb.TokenIds(ids=prompt), max_tokens=10), timeout=120)
        time.sleep(0.01)  # the request is queued or prefilling; no token has been read
        stream.cancel()
        self.assert_back_to_baseline()

    def test_client_disconnects(self):
        channel = grpc.insecure_channel(f"127.0.0.1:{self.server.grpc_port}", options=[("grpc.enable_http_proxy", 0)])
        stream = Stub(channel).Generate(greedy(text="ROMEO:", max_tokens=400, ignore_eos=True), timeout=120)
        next(stream)
        channel.close()
        self.assert_back_to_baseline()

    def test_deadline(self):
        req = greedy(text="ROMEO:", max_tokens=100000)
        req.cache.kind = pb.CachePolicy.KIND_STREAMING
        req.cache.n_sink = 4
        req.cache.window = 64
        # The call's deadline is the request's: either gRPC ends the call first (DEADLINE_EXCEEDED)
        # or the engine does, at its next step, with a final message saying so. Both are at the
        # deadline; which one comes first is a race of timers.
        try:
            _, _, final, _ = self.collect(req, timeout=0.5)
            self.assertIsNotNone(final)
            self.assertEqual(final.finish_reason, "deadline")
        except grpc.RpcError as e:
            self.assertEqual(e.code(), grpc.StatusCode.DEADLINE_EXCEEDED)
        self.assert_back_to_baseline()

    def test_errors(self):
        cases = [
            (pb.GenerateRequest(), grpc.StatusCode.INVALID_ARGUMENT),
            (pb.GenerateRequest(text=""), grpc.StatusCode.INVALID_ARGUMENT),
            (pb.GenerateRequest(token_ids=pb.TokenIds(ids=[10**6])), grpc.StatusCode.INVALID_ARGUMENT),
            (pb.GenerateRequest(token_ids=pb.TokenIds(ids=[-1])), grpc.StatusCode.INVALID_ARGUMENT),
            (pb.GenerateRequest(text="x", max_tokens=-1), grpc.StatusCode.INVALID_ARGUMENT),
            (pb.GenerateRequest(text="x", logprobs=99), grpc.StatusCode.INVALID_ARGUMENT),
            (pb.GenerateRequest(token_ids=pb.TokenIds(ids=[5] * 600)), grpc.StatusCode.INVALID_ARGUMENT),
        ]
        bad_temp = pb.GenerateRequest(text="x")
        bad_temp.sampling.temperature = -1
        cases.append((bad_temp, grpc.StatusCode.INVALID_ARGUMENT))
        for req, code in cases:
            with self.subTest(req=str(req)), self.assertRaises(grpc.RpcError) as e:
                self.collect(req, timeout=30)
            self.assertEqual(e.exception.code(), code, e.exception.details())
            self.assertTrue(e.exception.details())
        with self.assertRaises(grpc.RpcError) as e:
            self.stub.Detokenize(pb.DetokenizeRequest(token_ids=[10**6]))
        self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)

    def test_info(self):
        m = self.stub.GetModelInfo(pb.GetModelInfoRequest())
        self.assertEqual(m.model_name, "rill-shakespeare")
        self.assertEqual(m.architecture, "LlamaForCausalLM")
        self.assertEqual(m.context_length, 512)
        self.assertEqual(m.vocab_size, 4096)
        self.assertEqual(m.quantization, "none")
        s = self.stub.GetServerInfo(pb.GetServerInfoRequest())
        self.assertGreater(s.kv_block_size, 0)
        self.assertGreater(s.kv_blocks_total, 0)
        self.assertGreater(s.max_running, 0)
        self.assertTrue(s.version)
        load = self.stub.GetLoad(pb.GetLoadRequest())
        self.assertEqual(load.kv_blocks_total, s.kv_blocks_total)
        self.assertFalse(load.draining)

    def test_health_and_reflection(self):
        check = self.channel.unary_unary("/grpc.health.v1.Health/Check")
        self.assertEqual(check(b"", timeout=10), b"\x08\x01")  # status: SERVING
        self.assertEqual(check(b"\x0a\x0crill.v1.Rill", timeout=10), b"\x08\x01")
        reflect = self.channel.stream_stream("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo")
        replies = list(reflect(iter([b"\x3a\x00"]), timeout=10))  # list_services: ""
        self.assertTrue(any(b"rill.v1.Rill" in r for r in replies))


if __name__ == "__main__":
    unittest.main(verbosity=2)
