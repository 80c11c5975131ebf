"""End-to-end tests of structured outputs (issue 30) with the default model, which writes no JSON
unaided: 200 random JSON schemas of growing complexity over HTTP (response_format and
guided_json), greedy and sampled; every output that ends "stop" parses and validates with an
independent validator (python3-jsonschema), every "length" one is a valid JSON prefix. Regex
outputs match Python's re.fullmatch, choice outputs are one of the choices, GBNF outputs are in
the grammar's language, the same over gRPC (grpcio), and bad constraints are refused naming the
field. Tool calls forced by tool_choice (required / named) always parse: see tool_calls_test.py.

Schemas are bounded (short strings, few items, at most 3 levels) so a valid value fits in
max_tokens; requests run 8 at a time so the engine batches them."""
import concurrent.futures
import json
import os
import queue
import random
import re
import subprocess
import sys
import tempfile
import unittest

import grpc
import jsonschema

sys.path.insert(0, os.path.dirname(__file__))
from harness import SOURCE_DIR, Server  # noqa: E402

_GEN = tempfile.mkdtemp(prefix="rill_pb_")
subprocess.check_call(["protoc", f"--proto_path={SOURCE_DIR}/proto", f"--python_out={_GEN}",
                       f"{SOURCE_DIR}/proto/rill/v1/rill.proto"])
sys.path.insert(0, _GEN)
from rill.v1 import rill_pb2 as pb  # noqa: E402

NUM_SCHEMAS = int(os.environ.get("RILL_STRUCTURED_SCHEMAS", "200"))
MAX_TOKENS = 160
WORDS = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta", "iota", "kappa", "lam", "mu"]


def random_schema(rng, budget, depth=0):
    """A schema with about `budget` leaves, of the keywords the engine supports (docs)."""
    kinds = ["string", "integer", "number", "boolean", "null", "enum", "const", "array", "anyOf", "pattern"]
    if depth < 2 and budget > 2:
        kinds += ["object"] * 3
    k = rng.choice(kinds)
    if k == "string":
        s = {"type": "string", "maxLength": rng.randint(0, 6)}
        if rng.random() < 0.5:
            s["minLength"] = rng.randint(0, s["maxLength"])
        return s
    if k == "pattern":
        return {"type": "string", "pattern": rng.choice(["^[a-c]{1,3}$", "^[0-9]{2}-[a-z]$", "^(ab|cd)+x$"])}
    if k == "integer":
        lo = rng.randint(0, 50)
        return {"type": "integer", "minimum": lo, "maximum": lo + rng.randint(0, 500)}
    if k == "number":
        return {"type": "number", "minimum": 0, "maximum": rng.randint(1, 100)}
    if k == "boolean" or k == "null":
        return {"type": k}
    if k == "enum":
        return {"enum": rng.sample(WORDS, rng.randint(1, 4)) + ([None] if rng.random() < 0.3 else [])}
    if k == "const":
        return {"const": rng.choice([rng.choice(WORDS), rng.randint(0, 9), True])}
    if k == "array":
        items = random_schema(rng, 1, depth + 1)
        lo = rng.randint(0, 1)
        return {"type": "array", "items": items, "minItems": lo, "maxItems": lo + rng.randint(0, 2)}
    if k == "anyOf":
        return {"anyOf": [random_schema(rng, 1, depth + 1) for _ in range(rng.randint(2, 3))]}
    n = max(1, min(budget, rng.randint(1, 5)))
    names = rng.sample(WORDS, n)
    props = {name: random_schema(rng, max(1, (budget - n) // n), depth + 1) for name in names}
    required = [name for name in names if rng.random() < 0.7]
    return {"type": "object", "properties": props, "required": required}


def growing_schemas(count, seed=30):
    rng = random.Random(seed)
    out = []
    for i in range(count):
        budget = 1 + (i * 12) // max(1, count)  # 1 leaf first, about 12 at the end
        s = random_schema(rng, budget)
        if s.get("type") != "object":  # the top level of response_format schemas: an object
            s = {"type": "object", "properties": {"value": s}, "required": ["value"]}
        out.append(s)
    return out


def json_prefix_ok(text):
    """True when `text` is a prefix of some JSON text (no syntax error so far). A small
    pushdown scanner: stack of containers, the expected next token class."""
    i, n, stack = 0, len(text), []
    expect = "value"  # value | key | colon | comma_or_end | done
    ws = " \t\n\r"
    while i < n:
        c = text[i]
        if c in ws:
            i += 1
            continue
        if expect == "done":
            return False
        if expect in ("value", "key"):
            if c == '"':
                j = i + 1
                while j < n and text[j] != '"':
                    j += 2 if text[j] == "\\" else 1
                if j >= n:
                    return True  # inside a string
                i = j + 1
                expect = "colon" if expect == "key" else after_value(stack)
                continue
            if expect == "key":
                if c == "}" and prev_token(text, i) == "{":
                    stack.pop()
                    i += 1
                    expect = after_value(stack)
                    continue
                return False
            if c in "{[":
                stack.append(c)
                i += 1
                expect = "key" if c == "{" else "value"
                continue
            if c == "]" and stack and stack[-1] == "[" and prev_token(text, i) == "[":
                stack.pop()
                i += 1
                expect = after_value(stack)
                continue
            m = re.match(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?|true|false|null", text[i:])
            if m and i + m.end() < n:
                i += m.end()
                expect = after_value(stack)
                continue
            rest = text[i:]
            return any(w.startswith(rest) for w in ("true", "false", "null")) or bool(
                re.fullmatch(r"-?([0-9]+(\.[0-9]*)?([eE][+-]?[0-9]*)?)?", rest))
        if expect == "colon":
            if c != ":":
                return False
            i += 1
            expect = "value"
            continue
        if expect == "comma_or_end":
            if c == ",":
                i += 1
                expect = "key" if stack[-1] == "{" else "value"
                continue
            if (c == "}" and stack[-1] == "{") or (c == "]" and stack[-1] == "["):
                stack.pop()
                i += 1
                expect = after_value(stack)
                continue
            return False
    return True


def after_value(stack):
    return "comma_or_end" if stack else "done"


def prev_token(text, i):
    j = i - 1
    while j >= 0 and text[j] in " \t\n\r":
        j -= 1
    return text[j] if j >= 0 else ""


class StructuredOutputsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server()

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0, "rill-server did not exit 0 on SIGTERM"

    def post(self, path, body):
        status, data = self.server.post(path, body)
        return status, json.loads(data)

    def complete(self, body, chat=False):
        body = {"max_tokens": MAX_TOKENS, **body}
        if chat:
            body["messages"] = [{"role": "user", "content": "Answer in JSON."}]
            status, r = self.post("/v1/chat/completions", body)
        else:
            body.setdefault("prompt", "Speak:")
            status, r = self.post("/v1/completions", body)
        self.assertEqual(status, 200, r)
        c = r["choices"][0]
        return (c["message"]["content"] if chat else c["text"]), c["finish_reason"]

    def check_json(self, schema, text, reason, label):
        if reason == "stop":
            value = json.loads(text)
            jsonschema.validate(value, schema)
            return 1
        self.assertEqual(reason, "length", label)
        self.assertTrue(json_prefix_ok(text), f"{label}: not a JSON prefix: {text!r}")
        return 0

    def test_random_schemas_greedy_and_sampled(self):
        schemas = growing_schemas(NUM_SCHEMAS)

        def one(i):
            s = schemas[i]
            sampled = i % 2 == 1
            body = {"temperature": 1.0, "seed": i} if sampled else {"temperature": 0}
            if i % 3 == 0:
                body["guided_json"] = s
            else:
                body["response_format"] = {"type": "json_schema",
                                           "json_schema": {"name": f"s{i}", "schema": s, "strict": True}}
            text, reason = self.complete(body, chat=i % 4 == 1)
            return i, text, reason

        stops = 0
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            for i, text, reason in pool.map(one, range(len(schemas))):
                with self.subTest(schema=i):
                    stops += self.check_json(schemas[i], text, reason, f"schema {i} {json.dumps(schemas[i])}")
                    if reason == "stop":  # properties in the schema's order
                        keys = [k for k in schemas[i]["properties"] if f'"{k}"' in text]
                        self.assertEqual(keys, sorted(keys, key=lambda k: text.index(f'"{k}"')))
        self.assertGreater(stops, len(schemas) // 2, "most bounded schemas complete within max_tokens")

    def test_json_object(self):
        for seed in range(4):
            text, reason = self.complete({"response_format": {"type": "json_object"}, "temperature": 1.0,
                                          "seed": seed, "max_tokens": 60})
            if reason == "stop":
                self.assertIsInstance(json.loads(text), dict)
            else:
                self.assertTrue(json_prefix_ok(text), text)
                self.assertTrue(text.lstrip().startswith("{"), text)

    def test_regex_choice_and_grammar(self):
        regexes = [r"[A-Z][a-z]{2,6}", r"\d{3}-\d{4}", r"(yes|no|maybe)!", r"[a-f0-9]{8}",
                   r"(ab)+c?", r"[a-z]+@[a-z]+\.(com|org)", r"\w{1,5} \w{1,5}", r"-?[1-9][0-9]{0,3}\.[0-9]{2}"]
        for i, rx in enumerate(regexes):
            for sampled in (False, True):
                body = {"guided_regex": rx, "max_tokens": 40,
                        **({"temperature": 1.0, "seed": i} if sampled else {"temperature": 0})}
                text, reason = self.complete(body)
                if reason == "stop":
                    self.assertIsNotNone(re.fullmatch(rx, text), f"{rx}: {text!r}")
                else:
                    self.assertEqual(reason, "length")
        choices = ["to be", "not to be", "that is", "the question"]
        for seed in range(6):
            text, reason = self.complete({"guided_choice": choices, "temperature": 1.0, "seed": seed}, chat=seed % 2)
            self.assertEqual(reason, "stop")
            self.assertIn(text, choices)
        gbnf = 'root ::= "(" item ("," item)* ")"\nitem ::= [0-9] | "x"'
        for seed in range(4):
            text, reason = self.complete({"guided_grammar": gbnf, "temperature": 1.0, "seed": seed, "max_tokens": 40})
            if reason == "stop":
                self.assertRegex(text, r"^\(([0-9x])(,[0-9x])*\)$")

    def test_response_format_text_is_unconstrained(self):
        a, _ = self.complete({"response_format": {"type": "text"}, "temperature": 0, "max_tokens": 12})
        b, _ = self.complete({"temperature": 0, "max_tokens": 12})
        self.assertEqual(a, b)

    def test_bad_constraints_name_the_field(self):
        cases = [
            ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"not": {}}}}},
             "response_format", "not"),
            ({"response_format": {"type": "yaml"}}, "response_format", "type"),
            ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, "response_format",
             "schema"),
            ({"guided_regex": "(a"}, "guided_regex", "regex"),
            ({"guided_regex": "(?=a)b"}, "guided_regex", "look"),
            ({"guided_grammar": "root ::= foo"}, "guided_grammar", "foo"),
            ({"guided_choice": []}, "guided_choice", "non-empty"),
            ({"guided_json": {"type": "object"}, "guided_regex": "a"}, "guided_regex", "at most one"),
            ({"guided_json": {"type": "string", "maxLength": 100000}}, "guided_json", "limit"),
        ]
        for body, param, needle in cases:
            status, r = self.post("/v1/completions", {"prompt": "x", "max_tokens": 4, **body})
            self.assertEqual(status, 400, (body, r))
            self.assertEqual(r["error"]["param"], param, r)
            self.assertIn(needle, r["error"]["message"].lower(), r)
        text, reason = self.complete({"guided_choice": ["ok"]})  # nothing else disturbed
        self.assertEqual((text, reason), ("ok", "stop"))

    def test_session_turns_take_one_constraint_each(self):
        status, sess = self.post("/v1/sessions", {"cache": {"policy": "streaming", "n_sink": 4, "window": 256}})
        self.assertEqual(status, 201, sess)
        for rx in (r"[a-z]{4}", r"\d{3}", r"(yes|no)"):
            text, reason = self.complete({"session_id": sess["id"], "guided_regex": rx, "max_tokens": 20})
            self.assertEqual(reason, "stop")
            self.assertIsNotNone(re.fullmatch(rx, text), (rx, text))
        # gRPC: a Session call attached to the same session, a constraint per turn.
        ch = grpc.insecure_channel(f"127.0.0.1:{self.server.grpc_port}")
        call = ch.stream_stream("/rill.v1.Rill/Session", request_serializer=pb.SessionRequest.SerializeToString,
                                response_deserializer=pb.SessionResponse.FromString)
        requests = queue.Queue()

        def feed():
            while (m := requests.get()) is not None:
                yield m
        responses = call(feed(), timeout=120)
        requests.put(pb.SessionRequest(open=pb.SessionOpen(attach_session_id=sess["id"])))
        self.assertEqual(next(responses).WhichOneof("kind"), "opened")
        for turn in (pb.SessionTurn(text=" x", max_tokens=20, regex=r"[0-9]{2}"),
                     pb.SessionTurn(text=" y", max_tokens=20, choice=pb.Choices(choices=["up", "down"]))):
            requests.put(pb.SessionRequest(turn=turn))
            text = ""
            while True:
                m = next(responses)
                self.assertEqual(m.WhichOneof("kind"), "turn", m)
                text += m.turn.text
                if m.turn.HasField("final"):
                    break
            self.assertEqual(m.turn.final.finish_reason, "stop")
            if turn.HasField("regex"):
                self.assertRegex(text, r"^[0-9]{2}$")
            else:
                self.assertIn(text, ["up", "down"])
        requests.put(None)
        list(responses)
        ch.close()

    def test_grpc_constraints(self):
        ch = grpc.insecure_channel(f"127.0.0.1:{self.server.grpc_port}")
        gen = ch.unary_stream("/rill.v1.Rill/Generate", request_serializer=pb.GenerateRequest.SerializeToString,
                              response_deserializer=pb.GenerateResponse.FromString)

        def run(**fields):
            req = pb.GenerateRequest(text="Speak:", max_tokens=MAX_TOKENS, **fields)
            text, final = "", None
            for m in gen(req, timeout=120):
                text += m.text
                if m.HasField("final"):
                    final = m.final
            return text, final.finish_reason

        for i, s in enumerate(growing_schemas(12, seed=7)):
            text, reason = run(json_schema=json.dumps(s), sampling=pb.SamplingParameters(temperature=1.0, seed=i))
            self.check_json(s, text, reason, f"grpc schema {i}")
        text, reason = run(regex=r"[a-z]{3}-\d{2}")
        self.assertEqual(reason, "stop")
        self.assertIsNotNone(re.fullmatch(r"[a-z]{3}-\d{2}", text), text)
        text, reason = run(choice=pb.Choices(choices=["left", "right"]))
        self.assertIn(text, ["left", "right"])
        text, reason = run(grammar='root ::= "<" [a-c]{2} ">"')
        self.assertRegex(text, r"^<[a-c]{2}>$")
        with self.assertRaises(grpc.RpcError) as e:
            list(gen(pb.GenerateRequest(text="x", max_tokens=4, regex="(a"), timeout=30))
        self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("regex", e.exception.details())
        ch.close()


if __name__ == "__main__":
    unittest.main()
