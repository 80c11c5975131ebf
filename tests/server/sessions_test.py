"""End-to-end tests of multi-turn sessions (issue 23) on the real rill-server, with clients Rill did
not write: Python's standard library for HTTP (POST/GET/DELETE /v1/sessions, session turns on chat
and completions, streamed and not) and grpcio for the rill.v1 Session RPC. A tiny window (4 sinks +
32) makes the conversation outgrow the cache within a few turns. Also the lifetimes of issue 27:
never-used sessions are counted and expire, a session deleted and created again under the same id
is left alone by the old one's turn and by the end of the gRPC call that created the old one, and
ids over 128 bytes are refused naming the limit."""
import http.client
import json
import os
import queue
import subprocess
import sys
import tempfile
import time
import unittest

import grpc

sys.path.insert(0, os.path.dirname(__file__))
from harness import SOURCE_DIR, Server, metric_value, wait_until  # noqa: E402

_GEN = tempfile.mkdtemp(prefix="rill_pb_")
subprocess.check_call(["protoc", f"--proto_path={SOURCE_DIR}/proto", f"--python_out={_GEN}",
                       f"{SOURCE_DIR}/proto/rill/v1/rill.proto"])
sys.path.insert(0, _GEN)
from rill.v1 import rill_pb2 as pb  # noqa: E402

POLICY = {"policy": "streaming", "n_sink": 4, "window": 32}


def sse_events(resp):
    """The JSON events of an SSE response, up to [DONE]."""
    events = []
    for raw in resp:
        line = raw.decode().strip()
        if line == "data: [DONE]":
            break
        if line.startswith("data: "):
            events.append(json.loads(line[6:]))
    return events


class HttpSessionsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server()

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0, "rill-server did not exit 0 on SIGTERM"

    def call(self, method, path, body=None):
        status, data = self.server.request(method, path, body)
        return status, json.loads(data) if data else None

    def create(self, **body):
        status, s = self.call("POST", "/v1/sessions", {"cache": POLICY, **body})
        self.assertEqual(status, 201, s)
        self.addCleanup(self.server.request, "DELETE", f"/v1/sessions/{s['id']}")
        return s

    def info(self, sid):
        status, s = self.call("GET", f"/v1/sessions/{sid}")
        self.assertEqual(status, 200, s)
        return s

    def open_chat_stream(self, sid, content, **extra):
        conn = http.client.HTTPConnection("127.0.0.1", self.server.http_port, timeout=120)
        body = {"session_id": sid, "messages": [{"role": "user", "content": content}], "stream": True,
                "stream_options": {"include_usage": True}, **extra}
        conn.request("POST", "/v1/chat/completions", body=json.dumps(body),
                     headers={"Content-Type": "application/json"})
        return conn, conn.getresponse()

    def chat_turn(self, sid, content, **extra):
        """A streamed chat turn: (text, finish_reason, usage)."""
        conn, resp = self.open_chat_stream(sid, content, **extra)
        if resp.status != 200:
            self.fail(f"{resp.status}: {resp.read()[:300]}")
        text, reason, usage = "", None, None
        for e in sse_events(resp):
            self.assertNotIn("error", e)
            for c in e["choices"]:
                text += c["delta"].get("content", "")
                reason = c["finish_reason"] or reason
            usage = e.get("usage") or usage
        conn.close()
        return text, reason, usage

    def completion_turn(self, sid, prompt, **extra):
        status, r = self.call("POST", "/v1/completions",
                              {"session_id": sid, "prompt": prompt, "return_token_ids": True, **extra})
        self.assertEqual(status, 200, r)
        return r

    def test_create_get_delete(self):
        s = self.create(id="life-1", temperature=0, top_k=5, seed=7, max_tokens=9)
        self.assertEqual(s["id"], "life-1")
        self.assertEqual(s["object"], "session")
        self.assertGreater(s["created"], 1.7e9)
        self.assertEqual(s["cache"], POLICY)
        self.assertEqual((s["turns"], s["tokens_seen"], s["tokens_cached"]), (0, 0, 0))
        self.assertFalse(s["turn_running"])
        self.assertEqual(s["residence"], "none")
        self.assertEqual((s["defaults"]["temperature"], s["defaults"]["top_k"], s["defaults"]["seed"],
                          s["defaults"]["max_tokens"]), (0, 5, 7, 9))
        self.assertEqual(self.info("life-1")["created"], s["created"])
        status, d = self.call("DELETE", "/v1/sessions/life-1")
        self.assertEqual((status, d), (200, {"id": "life-1", "object": "session", "deleted": True}))
        for method in ("GET", "DELETE"):
            status, e = self.call(method, "/v1/sessions/life-1")
            self.assertEqual(status, 404, e)
            self.assertEqual(e["error"]["type"], "not_found_error")
        status, e = self.call("POST", "/v1/chat/completions",
                              {"session_id": "life-1", "messages": [{"role": "user", "content": "hi"}]})
        self.assertEqual((status, e["error"]["param"]), (404, "session_id"))
        # A session id is unique among live sessions.
        self.create(id="life-2")
        status, e = self.call("POST", "/v1/sessions", {"id": "life-2", "cache": POLICY})
        self.assertEqual(status, 400, e)

    def test_chat_turns_stream_and_outgrow_the_window(self):
        s = self.create(temperature=0, max_tokens=12)
        seen, turns = 0, 0
        for i in range(4):
            text, reason, usage = self.chat_turn(s["id"], f"Speak again, turn {i}.", ignore_eos=True)
            turns += 1
            self.assertEqual(reason, "length", (i, text, usage))
            self.assertEqual(usage["completion_tokens"], 12, "the session's max_tokens applies")
            self.assertTrue(text)
            info = self.info(s["id"])
            self.assertEqual(info["turns"], turns)
            self.assertGreaterEqual(info["tokens_seen"], seen + usage["prompt_tokens"] + 11)
            if i > 0:
                # Only the turn's own tokens are prefilled, not the conversation so far.
                self.assertLess(usage["prompt_tokens"], seen)
            seen = info["tokens_seen"]
            self.assertFalse(info["turn_running"])
            self.assertLessEqual(info["tokens_cached"], 4 + 32)
            self.assertIn(info["residence"], ("gpu", "host"))
        self.assertGreater(seen, 4 + 32)
        self.assertGreater(info["tokens_evicted"], 0)
        self.assertEqual(info["tokens_evicted"] + info["tokens_cached"], info["tokens_seen"])
        # A client field overrides the session's default for this turn only; JSON answers too.
        status, r = self.call("POST", "/v1/chat/completions",
                              {"session_id": s["id"], "messages": [{"role": "user", "content": "Briefly."}],
                               "max_tokens": 3, "ignore_eos": True})
        self.assertEqual(status, 200, r)
        self.assertEqual(r["usage"]["completion_tokens"], 3)
        self.assertEqual(r["choices"][0]["message"]["role"], "assistant")
        self.assertEqual(self.info(s["id"])["turns"], 5)

    def test_concurrent_turn_is_a_conflict(self):
        s = self.create(temperature=0)
        conn, resp = self.open_chat_stream(s["id"], "Speak at length.", max_tokens=100000, ignore_eos=True)
        self.assertEqual(resp.status, 200)
        self.assertTrue(resp.readline())  # the stream has started: the turn runs
        self.assertTrue(self.info(s["id"])["turn_running"])
        status, e = self.call("POST", "/v1/chat/completions",
                              {"session_id": s["id"], "messages": [{"role": "user", "content": "me too"}]})
        self.assertEqual(status, 409, e)
        self.assertEqual(e["error"]["type"], "conflict_error")
        resp.close()  # the socket closes with both: the running turn is cancelled, the session stays
        conn.close()
        self.assertTrue(wait_until(lambda: not self.info(s["id"])["turn_running"], timeout=30))
        text, reason, _ = self.chat_turn(s["id"], "Now you.", max_tokens=4)
        self.assertIn(reason, ("stop", "length"))

    def test_wrong_methods_have_allow(self):
        for method, path, allow in (("GET", "/v1/sessions", "POST"), ("PUT", "/v1/sessions/x", "GET, HEAD, DELETE")):
            conn = http.client.HTTPConnection("127.0.0.1", self.server.http_port, timeout=60)
            conn.request(method, path)
            r = conn.getresponse()
            self.assertEqual((r.status, r.getheader("Allow")), (405, allow))
            conn.close()

    def test_completion_turns_add_no_bos_after_the_first(self):
        s = self.create(temperature=0, max_tokens=4)
        first, later = "ROMEO:", "\nJULIET:"
        _, with_bos = self.call("POST", "/tokenize", {"prompt": first})
        _, no_bos = self.call("POST", "/tokenize", {"prompt": later, "add_special_tokens": False})
        r1 = self.completion_turn(s["id"], first)
        self.assertEqual(r1["usage"]["prompt_tokens"], with_bos["count"])
        r2 = self.completion_turn(s["id"], later)
        self.assertEqual(r2["usage"]["prompt_tokens"], no_bos["count"])
        # The session's turns are completions: chat messages are refused.
        status, e = self.call("POST", "/v1/chat/completions",
                              {"session_id": s["id"], "messages": [{"role": "user", "content": "hi"}]})
        self.assertEqual((status, e["error"]["param"]), (400, "messages"), e)
        # So is another cache policy than the session's.
        status, e = self.call("POST", "/v1/completions", {"session_id": s["id"], "prompt": "x",
                                                          "cache": {"policy": "full"}})
        self.assertEqual((status, e["error"]["param"]), (400, "cache"), e)

    def run_session(self, prompts, max_tokens=10):
        s = self.create(temperature=0, max_tokens=max_tokens)
        outs = [self.completion_turn(s["id"], p, ignore_eos=True)["choices"][0]["token_ids"] for p in prompts]
        self.call("DELETE", f"/v1/sessions/{s['id']}")
        return outs

    def turn_prompts(self):
        _, a = self.call("POST", "/tokenize", {"prompt": "ROMEO:"})
        _, b = self.call("POST", "/tokenize", {"prompt": "\nJULIET:", "add_special_tokens": False})
        _, c = self.call("POST", "/tokenize", {"prompt": "\nROMEO:", "add_special_tokens": False})
        return [a["tokens"], b["tokens"], c["tokens"]]

    def test_identical_sessions_give_identical_tokens(self):
        prompts = self.turn_prompts()
        first = self.run_session(prompts)
        self.assertEqual([len(o) for o in first], [10, 10, 10])
        self.assertEqual(self.run_session(prompts), first)

    def test_session_equals_one_request_over_the_whole_stream(self):
        # The session's stream is every turn's prompt and output in order: one streaming request
        # over the same tokens with the same policy continues it with the same greedy tokens.
        prompts = self.turn_prompts()
        outs = self.run_session(prompts)
        stream = prompts[0] + outs[0] + prompts[1] + outs[1] + prompts[2]
        status, r = self.call("POST", "/v1/completions",
                              {"prompt": stream, "max_tokens": 10, "temperature": 0, "ignore_eos": True,
                               "cache": POLICY, "return_token_ids": True})
        self.assertEqual(status, 200, r)
        self.assertEqual(r["choices"][0]["token_ids"], outs[2])

    def test_delete_and_recreate_during_a_running_turn_leaves_the_new_session_intact(self):
        # Regression (issue 27): the old (completions) turn's end fixed the new session's kind,
        # so its first chat turn was refused.
        for attempt in range(3):
            sid = f"recreate-http-{attempt}"
            self.create(id=sid, temperature=0)
            conn = http.client.HTTPConnection("127.0.0.1", self.server.http_port, timeout=120)
            conn.request("POST", "/v1/completions",
                         body=json.dumps({"session_id": sid, "prompt": "ROMEO:", "max_tokens": 100000,
                                          "ignore_eos": True, "stream": True}),
                         headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            self.assertEqual(resp.status, 200)
            self.assertTrue(resp.readline())  # the old turn runs
            self.assertEqual(self.call("DELETE", f"/v1/sessions/{sid}")[0], 200)
            self.create(id=sid, temperature=0, max_tokens=3)
            events = sse_events(resp)  # the old turn ends, cancelled by the delete
            conn.close()
            self.assertEqual(events[-1]["choices"][0]["finish_reason"], "cancelled", events[-1])
            info = self.info(sid)
            self.assertEqual((info["turns"], info["tokens_seen"], info["residence"]), (0, 0, "none"), info)
            self.assertEqual(info["defaults"]["max_tokens"], 3)
            _, reason, usage = self.chat_turn(sid, "Good morrow.")  # refused (400) before the fix
            self.assertIn(reason, ("stop", "length"))
            self.assertLessEqual(usage["completion_tokens"], 3)
            self.assertEqual(self.info(sid)["turns"], 1)

    def test_kv_returns_to_baseline_after_delete(self):
        def kv():
            return metric_value(self.server.metrics(), "rill_kv_cache_usage_ratio")
        self.assertTrue(wait_until(lambda: kv() == 0, timeout=30))
        s = self.create(temperature=0, max_tokens=8)
        self.completion_turn(s["id"], "ROMEO:")
        self.call("DELETE", f"/v1/sessions/{s['id']}")
        self.assertTrue(wait_until(lambda: kv() == 0, timeout=30), kv())


class ExpiryTest(unittest.TestCase):
    def test_idle_session_expires(self):
        server = Server("--session-idle-ttl-ms", "300")
        try:
            status, s = server.request("POST", "/v1/sessions", {"cache": POLICY, "max_tokens": 2})
            self.assertEqual(status, 201, s)
            sid = json.loads(s)["id"]
            status, _ = server.post("/v1/completions", {"session_id": sid, "prompt": "ROMEO:"})
            self.assertEqual(status, 200)

            def gone():
                return server.get(f"/v1/sessions/{sid}")[0] == 404
            self.assertTrue(wait_until(gone, timeout=30))
            status, e = server.post("/v1/completions", {"session_id": sid, "prompt": "more"})
            self.assertEqual(status, 404)
            self.assertIn("expired", json.loads(e)["error"]["message"])
        finally:
            self.assertEqual(server.stop(), 0)


class NeverUsedTest(unittest.TestCase):
    def test_never_used_sessions_are_counted_expire_and_free_their_slots(self):
        # Regression (issue 27): sessions created but never given a turn were neither counted nor
        # expired, so --max-sessions of them locked creation (503) until a restart.
        server = Server("--session-idle-ttl-ms", "500", "--max-sessions", "2")
        try:
            ids = []
            for _ in range(2):
                status, s = server.post("/v1/sessions", {"cache": POLICY})
                self.assertEqual(status, 201, s)
                ids.append(json.loads(s)["id"])

            def live(state):
                return metric_value(server.metrics(), "rill_sessions", state=state)
            self.assertTrue(wait_until(lambda: live("new") == 2, timeout=10), server.metrics())
            self.assertEqual(server.post("/v1/sessions", {"cache": POLICY})[0], 503)
            for sid in ids:
                self.assertTrue(wait_until(lambda: server.get(f"/v1/sessions/{sid}")[0] == 404, timeout=30))
                status, e = server.get(f"/v1/sessions/{sid}")
                self.assertIn("expired: idle for more than 0.5 s", json.loads(e)["error"]["message"])
            self.assertEqual(live("new"), 0)
            self.assertEqual(metric_value(server.metrics(), "rill_sessions_expired_total", reason="idle_ttl"), 2)
            for _ in range(2):
                self.assertEqual(server.post("/v1/sessions", {"cache": POLICY})[0], 201)
        finally:
            self.assertEqual(server.stop(), 0)


class LimitTest(unittest.TestCase):
    def test_max_sessions_is_overload(self):
        server = Server("--max-sessions", "1")
        try:
            status, a = server.post("/v1/sessions", {"cache": POLICY})
            self.assertEqual(status, 201, a)
            status, e = server.post("/v1/sessions", {"cache": POLICY})
            self.assertEqual(status, 503, e)
            self.assertEqual(json.loads(e)["error"]["type"], "overloaded_error")
            self.assertEqual(server.request("DELETE", f"/v1/sessions/{json.loads(a)['id']}")[0], 200)
            self.assertEqual(server.post("/v1/sessions", {"cache": POLICY})[0], 201)
        finally:
            self.assertEqual(server.stop(), 0)

    def test_ids_over_128_bytes_are_refused_naming_the_limit(self):
        server = Server()
        try:
            status, s = server.post("/v1/sessions", {"id": "i" * 128, "cache": POLICY})
            self.assertEqual(status, 201, s)
            self.assertEqual(server.get("/v1/sessions/" + "i" * 128)[0], 200)
            self.assertEqual(server.request("DELETE", "/v1/sessions/" + "i" * 128)[0], 200)
            # The attack shape: a 100,000-byte id was created, then could never be read or deleted
            # (its URL is over the header limit).
            for method, path, body, param in (
                    ("POST", "/v1/sessions", {"id": "i" * 100000, "cache": POLICY}, "id"),
                    ("POST", "/v1/completions", {"session_id": "i" * 129, "prompt": "a"}, "session_id"),
                    ("GET", "/v1/sessions/" + "i" * 129, None, None),
                    ("DELETE", "/v1/sessions/" + "i" * 129, None, None)):
                with self.subTest(method=method, path=path[:30]):
                    status, e = server.request(method, path, body)
                    self.assertEqual(status, 400, e[:300])
                    err = json.loads(e)["error"]
                    self.assertIn("over the limit of 128", err["message"])
                    self.assertEqual(err["param"], param)
        finally:
            self.assertEqual(server.stop(), 0)


class Stub:
    def __init__(self, channel):
        def unary(name, req, resp):
            return channel.unary_unary(f"/rill.v1.Rill/{name}", request_serializer=req.SerializeToString,
                                       response_deserializer=resp.FromString)
        self.Session = channel.stream_stream("/rill.v1.Rill/Session",
                                             request_serializer=pb.SessionRequest.SerializeToString,
                                             response_deserializer=pb.SessionResponse.FromString)
        self.CreateSession = unary("CreateSession", pb.SessionOptions, pb.SessionInfo)
        self.GetSession = unary("GetSession", pb.GetSessionRequest, pb.SessionInfo)
        self.DeleteSession = unary("DeleteSession", pb.DeleteSessionRequest, pb.DeleteSessionResponse)
        self.GetLoad = unary("GetLoad", pb.GetLoadRequest, pb.GetLoadResponse)
        self.Cancel = unary("Cancel", pb.CancelRequest, pb.CancelResponse)


class SessionCall:
    """A Session call whose requests are fed one at a time; close() is the client's WritesDone."""

    def __init__(self, stub, timeout=120):
        self.requests = queue.Queue()

        def feed():
            while (m := self.requests.get()) is not None:
                yield m
        self.responses = stub.Session(feed(), timeout=timeout)

    def send(self, **kind):
        self.requests.put(pb.SessionRequest(**kind))

    def next(self):
        return next(self.responses)

    def turn(self, request_id="", **fields):
        self.send(turn=pb.SessionTurn(request_id=request_id, **fields))

    def read_turn(self):
        """Messages up to the turn's final: (ids, text, final)."""
        ids, text = [], ""
        while True:
            m = self.next()
            assert m.WhichOneof("kind") == "turn", m
            ids += list(m.turn.token_ids)
            text += m.turn.text
            if m.turn.HasField("final"):
                return ids, text, m.turn.final

    def close(self):
        self.requests.put(None)
        return list(self.responses)


class GrpcSessionTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server()
        cls.channel = grpc.insecure_channel(f"127.0.0.1:{cls.server.grpc_port}",
                                            options=[("grpc.enable_http_proxy", 0)])
        cls.stub = Stub(cls.channel)
        cls.baseline = cls.stub.GetLoad(pb.GetLoadRequest(), timeout=10)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        assert cls.server.stop() == 0

    def options(self, **kw):
        o = pb.SessionOptions(cache=pb.CachePolicy(kind=pb.CachePolicy.KIND_STREAMING, n_sink=4, window=32), **kw)
        o.sampling.temperature = 0
        return o

    def assert_gone(self, sid):
        with self.assertRaises(grpc.RpcError) as e:
            self.stub.GetSession(pb.GetSessionRequest(session_id=sid), timeout=10)
        self.assertEqual(e.exception.code(), grpc.StatusCode.NOT_FOUND)

    def assert_kv_baseline(self):
        def idle():
            load = self.stub.GetLoad(pb.GetLoadRequest(), timeout=10)
            return load.running == 0 and load.kv_blocks_used == self.baseline.kv_blocks_used
        self.assertTrue(wait_until(idle, timeout=30), str(self.stub.GetLoad(pb.GetLoadRequest())))

    def test_three_turns_then_close_frees_the_session(self):
        call = SessionCall(self.stub)
        call.send(open=pb.SessionOpen(create=self.options(max_tokens=6)))
        opened = call.next().opened
        sid = opened.options.session_id
        self.assertTrue(sid)
        self.assertEqual((opened.turns, opened.residence, opened.options.max_tokens), (0, "none", 6))
        call.turn(text="ROMEO:")
        ids, text, final = call.read_turn()
        self.assertEqual((len(ids), final.finish_reason in ("stop", "length")), (final.usage.completion_tokens, True))
        # The second turn runs long; a third sent meanwhile is refused with a per-turn error.
        call.turn(request_id="t2", text="\nJULIET:", max_tokens=200, ignore_eos=True)
        call.turn(request_id="t3-early", text="\nROMEO:")
        saw_error, final = False, None
        while final is None:
            m = call.next()
            if m.WhichOneof("kind") == "error":
                self.assertEqual((m.error.request_id, m.error.code),
                                 ("t3-early", grpc.StatusCode.FAILED_PRECONDITION.value[0]))
                saw_error = True
            elif m.turn.HasField("final"):
                self.assertEqual(m.turn.request_id, "t2")
                final = m.turn.final
        self.assertTrue(saw_error)
        self.assertEqual((final.finish_reason, final.usage.completion_tokens), ("length", 200))
        self.assertGreater(final.usage.evicted_tokens, 0)
        call.turn(request_id="t3", text="\nROMEO:")
        _, _, final = call.read_turn()
        info = self.stub.GetSession(pb.GetSessionRequest(session_id=sid), timeout=10)
        self.assertEqual(info.turns, 3)
        self.assertGreater(info.tokens_evicted, 0)
        self.assertEqual(call.close(), [])  # WritesDone: the call ends OK, the session with it
        self.assert_gone(sid)
        self.assert_kv_baseline()

    def test_chat_turns_and_cancel_mid_turn(self):
        call = SessionCall(self.stub)
        call.send(open=pb.SessionOpen(create=self.options(session_id="grpc-chat", max_tokens=5)))
        self.assertEqual(call.next().opened.options.session_id, "grpc-chat")
        for content in ("Good morrow.", "And to you?"):
            call.turn(messages=pb.ChatMessages(messages=[pb.ChatMessage(role="user", content=content)]))
            _, _, final = call.read_turn()
            self.assertIn(final.finish_reason, ("stop", "length"))
        # Raw text in a chat session is refused, per turn.
        call.turn(text="plain")
        m = call.next()
        self.assertEqual(m.error.code, grpc.StatusCode.INVALID_ARGUMENT.value[0], m)
        call.turn(messages=pb.ChatMessages(messages=[pb.ChatMessage(role="user", content="Talk.")]),
                  max_tokens=100000, ignore_eos=True)
        self.assertEqual(call.next().WhichOneof("kind"), "turn")
        call.responses.cancel()
        self.assertTrue(wait_until(lambda: self._gone("grpc-chat"), timeout=30))
        self.assert_kv_baseline()

    def _gone(self, sid):
        try:
            self.stub.GetSession(pb.GetSessionRequest(session_id=sid), timeout=10)
            return False
        except grpc.RpcError as e:
            return e.code() == grpc.StatusCode.NOT_FOUND

    def test_attach_leaves_the_session_open(self):
        info = self.stub.CreateSession(self.options(session_id="grpc-attach", max_tokens=3), timeout=10)
        self.assertEqual(info.options.session_id, "grpc-attach")
        call = SessionCall(self.stub)
        call.send(open=pb.SessionOpen(attach_session_id="grpc-attach"))
        self.assertEqual(call.next().opened.options.session_id, "grpc-attach")
        call.turn(token_ids=pb.TokenIds(ids=[1, 2, 3]))
        call.read_turn()
        call.close()
        self.assertEqual(self.stub.GetSession(pb.GetSessionRequest(session_id="grpc-attach")).turns, 1)
        self.assertTrue(self.stub.DeleteSession(pb.DeleteSessionRequest(session_id="grpc-attach")).found)
        self.assertFalse(self.stub.DeleteSession(pb.DeleteSessionRequest(session_id="grpc-attach")).found)
        self.assert_gone("grpc-attach")

    def test_ending_a_call_leaves_another_clients_session_with_the_same_id_open(self):
        # Regression (issue 27): a Session call that ended closed its session by id, so when the
        # session had been deleted and another client had created one with the same id, the call
        # closed that one (and took its turns in it meanwhile).
        channel = grpc.insecure_channel(f"127.0.0.1:{self.server.grpc_port}",
                                        options=[("grpc.enable_http_proxy", 0), ("grpc.use_local_subchannel_pool", 1)])
        self.addCleanup(channel.close)
        other = Stub(channel)
        for sid, end in (("grpc-own-turn", "turn"), ("grpc-own-done", "writes_done")):
            with self.subTest(end=end):
                call = SessionCall(self.stub)
                call.send(open=pb.SessionOpen(create=self.options(session_id=sid, max_tokens=4)))
                self.assertEqual(call.next().opened.options.session_id, sid)
                self.assertTrue(other.DeleteSession(pb.DeleteSessionRequest(session_id=sid), timeout=10).found)
                other.CreateSession(self.options(session_id=sid, max_tokens=7), timeout=10)
                if end == "turn":
                    # The call's session is gone: its turn ends the call and never runs in theirs.
                    call.turn(text="ROMEO:")
                    with self.assertRaises(grpc.RpcError) as e:
                        call.next()
                    self.assertEqual(e.exception.code(), grpc.StatusCode.NOT_FOUND)
                    self.assertIn("a new session has the same id", e.exception.details())
                    call.requests.put(None)
                else:
                    self.assertEqual(call.close(), [])
                info = other.GetSession(pb.GetSessionRequest(session_id=sid), timeout=10)
                self.assertEqual((info.options.max_tokens, info.turns), (7, 0))
                self.assertTrue(other.DeleteSession(pb.DeleteSessionRequest(session_id=sid), timeout=10).found)

    def test_delete_and_recreate_during_a_running_turn(self):
        # Regression (issue 27): the old turn's end and the end of the call that created the old
        # session must leave the new session (same id, another client) intact.
        call = SessionCall(self.stub)
        call.send(open=pb.SessionOpen(create=self.options(session_id="grpc-re", max_tokens=4)))
        call.next()
        call.turn(text="ROMEO:", max_tokens=100000, ignore_eos=True)
        self.assertEqual(call.next().WhichOneof("kind"), "turn")
        self.assertTrue(self.stub.DeleteSession(pb.DeleteSessionRequest(session_id="grpc-re"), timeout=10).found)
        self.stub.CreateSession(self.options(session_id="grpc-re", max_tokens=3), timeout=10)
        _, _, final = call.read_turn()
        self.assertEqual(final.finish_reason, "cancelled")
        self.assertEqual(call.close(), [])
        # The new session takes a chat first turn (the old one's were prompts) and stays open.
        attached = SessionCall(self.stub)
        attached.send(open=pb.SessionOpen(attach_session_id="grpc-re"))
        self.assertEqual(attached.next().opened.turns, 0)
        attached.turn(messages=pb.ChatMessages(messages=[pb.ChatMessage(role="user", content="Hail.")]))
        _, _, final = attached.read_turn()
        self.assertIn(final.finish_reason, ("stop", "length"))
        self.assertLessEqual(final.usage.completion_tokens, 3)
        self.assertEqual(attached.close(), [])
        self.assertEqual(self.stub.GetSession(pb.GetSessionRequest(session_id="grpc-re"), timeout=10).turns, 1)
        self.assertTrue(self.stub.DeleteSession(pb.DeleteSessionRequest(session_id="grpc-re"), timeout=10).found)
        self.assert_kv_baseline()

    def test_turn_ids_are_cancelled_only_from_their_connection(self):
        # Regression (issue 27): any client could Cancel any request (session turns too) by its id.
        channel = grpc.insecure_channel(f"127.0.0.1:{self.server.grpc_port}",
                                        options=[("grpc.enable_http_proxy", 0), ("grpc.use_local_subchannel_pool", 1)])
        self.addCleanup(channel.close)
        other = Stub(channel)
        call = SessionCall(self.stub)
        call.send(open=pb.SessionOpen(create=self.options(max_tokens=4)))
        call.next()
        call.turn(request_id="my-turn", text="ROMEO:", max_tokens=100000, ignore_eos=True)
        self.assertEqual(call.next().turn.request_id, "my-turn")
        self.assertFalse(other.Cancel(pb.CancelRequest(request_id="my-turn"), timeout=10).found)
        self.assertTrue(self.stub.Cancel(pb.CancelRequest(request_id="my-turn"), timeout=10).found)
        _, _, final = call.read_turn()
        self.assertEqual(final.finish_reason, "cancelled")
        # A turn without request_id gets a server-assigned id: anyone holding it may cancel.
        call.turn(text="\nJULIET:", max_tokens=100000, ignore_eos=True)
        rid = call.next().turn.request_id
        self.assertRegex(rid, r"^grpc-[0-9a-f]{32}$")
        self.assertTrue(other.Cancel(pb.CancelRequest(request_id=rid), timeout=10).found)
        _, _, final = call.read_turn()
        self.assertEqual(final.finish_reason, "cancelled")
        self.assertEqual(call.close(), [])
        self.assert_kv_baseline()

    def test_session_ids_over_128_bytes_are_invalid_argument(self):
        for name, req in (("CreateSession", self.options(session_id="s" * 129)),
                          ("GetSession", pb.GetSessionRequest(session_id="s" * 100000)),
                          ("DeleteSession", pb.DeleteSessionRequest(session_id="s" * 129))):
            with self.subTest(name=name):
                with self.assertRaises(grpc.RpcError) as e:
                    getattr(self.stub, name)(req, timeout=10)
                self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
                self.assertIn("over the limit of 128", e.exception.details())

    def test_bad_opens_end_the_call(self):
        cases = [
            (dict(turn=pb.SessionTurn(text="hi")), grpc.StatusCode.INVALID_ARGUMENT),
            (dict(open=pb.SessionOpen(create=pb.SessionOptions())), grpc.StatusCode.INVALID_ARGUMENT),
            (dict(open=pb.SessionOpen(attach_session_id="nope")), grpc.StatusCode.NOT_FOUND),
        ]
        for first, code in cases:
            with self.subTest(first=str(first)):
                call = SessionCall(self.stub)
                call.send(**first)
                with self.assertRaises(grpc.RpcError) as e:
                    call.next()
                self.assertEqual(e.exception.code(), code)
                call.requests.put(None)


if __name__ == "__main__":
    unittest.main(verbosity=2)
