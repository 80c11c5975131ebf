"""End-to-end tests of tool calling (issue 30) over HTTP with Python's standard library: tools and
tool messages rendered through published chat templates (compared with transformers' renderings
in tests/golden/chat_templates.json), model replies that are calls returned as tool_calls (whole
and streamed as OpenAI streams them) with finish_reason tool_calls, replies that are not calls
returned as content, and the family detected from each template.

The default model cannot write a tool call, so each family is served by a model built to reply
with a fixed text (tests/server/toolcall_model.py) under that family's published template."""
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import unittest

import grpc

sys.path.insert(0, os.path.dirname(__file__))
from harness import SOURCE_DIR, Server  # noqa: E402
from toolcall_model import make_model  # noqa: E402

# Python message classes generated at test time with protoc (as grpc_api_test.py does).
_GEN = tempfile.mkdtemp(prefix="rill_pb_")
subprocess.check_call(["protoc", f"--proto_path={SOURCE_DIR}/proto", f"--python_out={_GEN}",
                       f"{SOURCE_DIR}/proto/rill/v1/rill.proto"])
sys.path.insert(0, _GEN)
from rill.v1 import rill_pb2 as pb  # noqa: E402

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
ASK = [{"role": "user", "content": "Weather in Paris?"}]

# Each family's model: its template and reply pieces (split inside the markers on purpose).
FAMILIES = {
    "hermes": ("qwen2.5", ["Checking.\n<tool", "_call>\n{\"name\": \"get_weather\", ", "\"arguments\": {\"city\": ",
                           "\"Paris\"}}\n</tool_call>"], ()),
    "llama3_json": ("llama-3.1", ["{\"name\": \"get_weather\", ", "\"parameters\": {\"city\": \"Paris\"}}"], ()),
    "mistral": ("mistral-nemo", ["[TOOL_CALLS]", "[{\"name\": \"get_weather\", \"arguments\": ",
                                 "{\"city\": \"Paris\"}}]"], ("[TOOL_CALLS]",)),
}
WANT_CONTENT = {"hermes": "Checking.", "llama3_json": None, "mistral": None}


def golden(template, conversation):
    with open(os.path.join(SOURCE_DIR, "tests/golden/chat_templates.json")) as f:
        for case in json.load(f)["cases"]:
            if (case["template"], case["conversation"], case["add_generation_prompt"]) == \
                    (template, conversation, True):
                return case["output"]
    raise KeyError(conversation)


def conversation(name):
    with open(os.path.join(SOURCE_DIR, "tests/fixtures/chat_templates/conversations.json")) as f:
        for c in json.load(f)["conversations"]:
            if c["name"] == name:
                return c
    raise KeyError(name)


def openai_messages(messages):
    """The fixture's messages as an OpenAI client sends them: arguments as JSON strings."""
    out = json.loads(json.dumps(messages))
    for m in out:
        for call in m.get("tool_calls") or []:
            call["function"]["arguments"] = json.dumps(call["function"]["arguments"])
    return out


class FamilyTest:
    """Mixed into one TestCase per family (FAMILY)."""
    FAMILY = None

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="rill_tools_")
        template, pieces, special = FAMILIES[cls.FAMILY]
        cls.template = template
        cls.reply = "".join(pieces)
        make_model(os.path.join(cls.dir, template), template, pieces, special)
        cls.server = Server("--model", os.path.join(cls.dir, template))

    @classmethod
    def tearDownClass(cls):
        code = cls.server.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)
        assert code == 0, "rill-server did not exit 0 on SIGTERM"

    def chat(self, **body):
        status, data = self.server.post("/v1/chat/completions", {"max_tokens": 32, **body})
        self.assertEqual(status, 200, data[:500])
        return json.loads(data)

    def stream(self, **body):
        status, data = self.server.post("/v1/chat/completions", {"max_tokens": 32, "stream": True, **body})
        self.assertEqual(status, 200, data[:500])
        lines = [l[6:] for l in data.decode().split("\n") if l.startswith("data: ")]
        self.assertEqual(lines[-1], "[DONE]")
        return [json.loads(l) for l in lines[:-1]]

    def test_call_is_returned_as_tool_calls(self):
        r = self.chat(messages=ASK, tools=[WEATHER, TIME])
        choice = r["choices"][0]
        self.assertEqual(choice["finish_reason"], "tool_calls")
        msg = choice["message"]
        self.assertEqual(msg["content"], WANT_CONTENT[self.FAMILY])
        self.assertEqual(len(msg["tool_calls"]), 1)
        call = msg["tool_calls"][0]
        self.assertEqual(call["type"], "function")
        self.assertEqual(call["function"]["name"], "get_weather")
        self.assertEqual(json.loads(call["function"]["arguments"]), {"city": "Paris"})
        if self.FAMILY == "mistral":
            self.assertRegex(call["id"], r"^[0-9a-f]{9}$")  # what Mistral's template accepts
        else:
            self.assertRegex(call["id"], r"^call_[0-9a-f]{32}$")

    def test_streamed_as_openai_streams_them(self):
        events = self.stream(messages=ASK, tools=[WEATHER], tool_choice="auto")
        content, calls, reasons = "", {}, []
        for e in events:
            for c in e["choices"]:
                d = c["delta"]
                content += d.get("content") or ""
                for tc in d.get("tool_calls", []):
                    if tc["index"] not in calls:
                        self.assertRegex(tc["id"], r"^(call_)?[0-9a-f]+$")
                        self.assertEqual(tc["type"], "function")
                        calls[tc["index"]] = {"name": tc["function"]["name"], "arguments": ""}
                    else:
                        self.assertNotIn("id", tc)
                        self.assertNotIn("name", tc["function"])
                    calls[tc["index"]]["arguments"] += tc["function"]["arguments"]
                if c["finish_reason"]:
                    reasons.append(c["finish_reason"])
        self.assertEqual(reasons, ["tool_calls"])
        self.assertEqual(content, WANT_CONTENT[self.FAMILY] or "")
        self.assertEqual(list(calls), [0])
        self.assertEqual(calls[0]["name"], "get_weather")
        self.assertEqual(json.loads(calls[0]["arguments"]), {"city": "Paris"})
        # Arguments arrive in more than one delta when the model writes them in pieces.
        deltas = [tc for e in events for c in e["choices"] for tc in c["delta"].get("tool_calls", [])]
        self.assertGreaterEqual(len(deltas), 1)

    def test_replies_are_content_without_parsing(self):
        # No tools, tool_choice none, or a call of a tool the request did not declare: content.
        for body in ({}, {"tools": [WEATHER], "tool_choice": "none"}, {"tools": [TIME]}):
            with self.subTest(body=body):
                r = self.chat(messages=ASK, skip_special_tokens=False, **body)
                self.assertEqual(r["choices"][0]["finish_reason"], "stop")
                self.assertEqual(r["choices"][0]["message"]["content"], self.reply)
                self.assertNotIn("tool_calls", r["choices"][0]["message"])

    def test_named_and_required_choices_parse(self):
        r = self.chat(messages=ASK, tools=[WEATHER, TIME],
                      tool_choice={"type": "function", "function": {"name": "get_weather"}})
        self.assertEqual(r["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "get_weather")
        r = self.chat(messages=ASK, tools=[WEATHER], tool_choice="required", parallel_tool_calls=False)
        self.assertEqual(len(r["choices"][0]["message"]["tool_calls"]), 1)

    def test_forced_calls_always_parse(self):
        # The model would call get_weather; a named get_time (or required over a tool with bounded
        # parameters) is grammar-constrained, so the call parses whatever the model prefers.
        city = {"type": "function", "function": {"name": "pick_city", "parameters": {
            "type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]}}, "required": ["city"]}}}
        for body in ({"tools": [WEATHER, TIME], "tool_choice": {"type": "function", "function": {"name": "get_time"}}},
                     {"tools": [city], "tool_choice": "required"},
                     {"tools": [city, TIME], "tool_choice": "required", "temperature": 1.0, "seed": 3}):
            for stream in (False, True):
                with self.subTest(body=body, stream=stream):
                    if stream:
                        events = self.stream(messages=ASK, max_tokens=200, **body)
                        names = [tc["function"]["name"] for e in events for c in e["choices"]
                                 for tc in c["delta"].get("tool_calls", []) if "name" in tc["function"]]
                        reasons = [c["finish_reason"] for e in events for c in e["choices"] if c["finish_reason"]]
                        self.assertEqual(reasons, ["tool_calls"])
                        self.assertGreaterEqual(len(names), 1)  # Mistral batches calls: maybe more
                        self.assertTrue(set(names) <= {"pick_city", "get_time"}, names)
                        continue
                    r = self.chat(messages=ASK, max_tokens=200, **body)
                    choice = r["choices"][0]
                    self.assertEqual(choice["finish_reason"], "tool_calls", choice)
                    call = choice["message"]["tool_calls"][0]["function"]
                    args = json.loads(call["arguments"])
                    if call["name"] == "pick_city":
                        self.assertIn(args["city"], ["Paris", "Rome"])
                    else:
                        self.assertEqual(call["name"], "get_time")
                        self.assertEqual(args, {})

    def test_forced_call_takes_no_other_constraint(self):
        status, data = self.server.post("/v1/chat/completions", {
            "messages": ASK, "tools": [WEATHER], "tool_choice": "required", "guided_regex": "a", "max_tokens": 4})
        self.assertEqual(status, 400, data)
        self.assertEqual(json.loads(data)["error"]["param"], "guided_regex")

    def test_tool_conversation_renders_as_transformers(self):
        # The fixture conversation (a call, its result, a reply, a question) with the server's
        # render: the prompt has exactly as many tokens as transformers' rendering.
        conv = conversation("tool_call_object_args")
        r = self.chat(messages=openai_messages(conv["messages"]), tools=conv["tools"], max_tokens=1)
        status, tok = self.server.post("/tokenize", {"prompt": golden(self.template, conv["name"]),
                                                    "add_special_tokens": False})
        self.assertEqual(status, 200)
        self.assertEqual(r["usage"]["prompt_tokens"], json.loads(tok)["count"])

    def test_follow_up_with_the_returned_call_renders(self):
        r = self.chat(messages=ASK, tools=[WEATHER])
        msg = r["choices"][0]["message"]
        follow = ASK + [msg, {"role": "tool", "tool_call_id": msg["tool_calls"][0]["id"], "content": "sunny"}]
        r2 = self.chat(messages=follow, tools=[WEATHER])
        self.assertGreater(r2["usage"]["prompt_tokens"], r["usage"]["prompt_tokens"])


class HermesTest(FamilyTest, unittest.TestCase):
    FAMILY = "hermes"


class Llama3JsonTest(FamilyTest, unittest.TestCase):
    FAMILY = "llama3_json"


class MistralTest(FamilyTest, unittest.TestCase):
    FAMILY = "mistral"


def pb_tool(tool):
    f = tool["function"]
    return pb.Tool(name=f["name"], description=f.get("description", ""),
                   parameters_json=json.dumps(f.get("parameters", {})))


class GrpcTest(unittest.TestCase):
    """The Hermes model over gRPC: Generate and a Session turn with tool_options."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="rill_tools_")
        template, pieces, special = FAMILIES["hermes"]
        make_model(os.path.join(cls.dir, "m"), template, pieces, special)
        cls.server = Server("--model", os.path.join(cls.dir, "m"))
        cls.channel = grpc.insecure_channel(f"127.0.0.1:{cls.server.grpc_port}")
        cls.generate = cls.channel.unary_stream("/rill.v1.Rill/Generate",
                                                request_serializer=pb.GenerateRequest.SerializeToString,
                                                response_deserializer=pb.GenerateResponse.FromString)
        cls.session = cls.channel.stream_stream("/rill.v1.Rill/Session",
                                                request_serializer=pb.SessionRequest.SerializeToString,
                                                response_deserializer=pb.SessionResponse.FromString)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        code = cls.server.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)
        assert code == 0

    def collect(self, responses):
        text, calls, final = "", {}, None
        for r in responses:
            text += r.text
            for d in r.tool_calls:
                if d.index not in calls:
                    self.assertTrue(d.id.startswith("call_"))
                    calls[d.index] = [d.name, ""]
                else:
                    self.assertEqual((d.id, d.name), ("", ""))
                calls[d.index][1] += d.arguments
            if r.HasField("final"):
                final = r.final
        return text, calls, final

    def messages(self, msgs):
        return pb.ChatMessages(messages=[pb.ChatMessage(**m) for m in msgs])

    def test_generate_streams_tool_calls(self):
        req = pb.GenerateRequest(messages=self.messages(ASK), max_tokens=32,
                                 tool_options=pb.ToolOptions(tools=[pb_tool(WEATHER), pb_tool(TIME)]))
        text, calls, final = self.collect(self.generate(req, timeout=60))
        self.assertEqual(text, "Checking.")
        self.assertEqual(list(calls), [0])
        self.assertEqual(calls[0][0], "get_weather")
        self.assertEqual(json.loads(calls[0][1]), {"city": "Paris"})
        self.assertEqual(final.finish_reason, "tool_calls")
        # Without tool options the same reply is text.
        text, calls, final = self.collect(self.generate(
            pb.GenerateRequest(messages=self.messages(ASK), max_tokens=32, include_special_tokens=True), timeout=60))
        self.assertEqual((text, calls, final.finish_reason), ("".join(FAMILIES["hermes"][1]), {}, "stop"))

    def test_tool_messages_render(self):
        call = pb.ToolCall(id="call_1", name="get_weather", arguments='{"city": "Paris"}')
        msgs = [pb.ChatMessage(**ASK[0]), pb.ChatMessage(role="assistant", tool_calls=[call]),
                pb.ChatMessage(role="tool", tool_call_id="call_1", content="sunny")]
        req = pb.GenerateRequest(messages=pb.ChatMessages(messages=msgs), max_tokens=32,
                                 tool_options=pb.ToolOptions(tools=[pb_tool(WEATHER)], tool_choice="required"))
        _, calls, final = self.collect(self.generate(req, timeout=60))
        self.assertEqual(final.finish_reason, "tool_calls")
        self.assertGreater(final.usage.prompt_tokens, 100)

    def test_bad_tool_options_are_invalid_argument(self):
        cases = [
            (pb.ToolOptions(tools=[pb.Tool(name="bad name")]), "tool_options.tools"),
            (pb.ToolOptions(tools=[pb.Tool(name="f", parameters_json="[1]")]), "tool_options.tools"),
            (pb.ToolOptions(tools=[pb_tool(WEATHER)], function_name="nope"), "tool_options.tool_choice"),
            (pb.ToolOptions(tool_choice="required"), "tool_options.tool_choice"),
        ]
        for options, param in cases:
            with self.subTest(param=param, options=str(options)):
                with self.assertRaises(grpc.RpcError) as err:
                    list(self.generate(pb.GenerateRequest(messages=self.messages(ASK), tool_options=options),
                                       timeout=60))
                self.assertEqual(err.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
                self.assertIn(("error-param", param), err.exception.trailing_metadata())
        with self.assertRaises(grpc.RpcError) as err:
            list(self.generate(pb.GenerateRequest(text="hi", tool_options=pb.ToolOptions(tools=[pb_tool(WEATHER)])),
                               timeout=60))
        self.assertEqual(err.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)

    def test_session_turn_with_tools(self):
        requests = queue.Queue()
        requests.put(pb.SessionRequest(open=pb.SessionOpen(create=pb.SessionOptions(
            cache=pb.CachePolicy(kind=pb.CachePolicy.KIND_STREAMING, n_sink=4, window=1024)))))
        requests.put(pb.SessionRequest(turn=pb.SessionTurn(
            messages=self.messages(ASK), max_tokens=32, tool_options=pb.ToolOptions(tools=[pb_tool(WEATHER)]))))

        def feed():
            while True:
                item = requests.get()
                if item is None:
                    return
                yield item

        responses = self.session(feed(), timeout=60)
        self.assertTrue(next(responses).HasField("opened"))
        turn = []
        for r in responses:
            turn.append(r.turn)
            if r.turn.HasField("final"):
                break
        requests.put(None)
        text, calls, final = self.collect(turn)
        self.assertEqual(final.finish_reason, "tool_calls")
        self.assertEqual(calls[0][0], "get_weather")


class ParserFlagTest(unittest.TestCase):
    def test_flag_overrides_detection(self):
        d = tempfile.mkdtemp(prefix="rill_tools_")
        try:
            template, pieces, special = FAMILIES["hermes"]
            make_model(os.path.join(d, "m"), template, pieces, special)
            server = Server("--model", os.path.join(d, "m"), "--tool-call-parser", "none")
            try:
                status, data = server.post("/v1/chat/completions", {"messages": ASK, "tools": [WEATHER]})
                self.assertEqual(status, 200)
                msg = json.loads(data)["choices"][0]["message"]
                self.assertEqual(msg["content"], "".join(pieces))
            finally:
                self.assertEqual(server.stop(), 0)
        finally:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    unittest.main(verbosity=2)
