"""HTTP and gRPC give the same answer to the same sampling value, and unset fields take the
server's defaults (its override, then the model's generation_config.json, then OpenAI's), on the
real rill-server with clients Rill did not write (Python's standard library, grpcio).

The sampling fields come from the engine's table itself (rill_sampling_fields_dump prints it), so
a new row is tested here without editing this file: for every field, values outside its range
are sent over HTTP (completions, POST /v1/sessions, a session turn) and gRPC (Generate,
CreateSession, a Session turn), and every answer must be the same status class, message and
param (gRPC: the `error-param` trailing metadata); its boundary values must be accepted by all."""
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import grpc

sys.path.insert(0, os.path.dirname(__file__))
from harness import SOURCE_DIR, Server  # noqa: E402

_GEN = tempfile.mkdtemp(prefix="rill_pb_")
subprocess.check_call(["protoc", f"--proto_path={SOURCE_DIR}/proto", f"--python_out={_GEN}",
                       f"{SOURCE_DIR}/proto/rill/v1/rill.proto"])
sys.path.insert(0, _GEN)
from rill.v1 import rill_pb2 as pb  # noqa: E402

DUMP = os.environ.get("RILL_SAMPLING_FIELDS_DUMP",
                      os.path.join(SOURCE_DIR, "build/tests/server/rill_sampling_fields_dump"))
FIELDS = json.loads(subprocess.check_output([DUMP]))
POLICY = {"policy": "streaming", "n_sink": 4, "window": 32}
INT32 = (-2**31, 2**31 - 1)


def out_of_range(f):
    """Values outside f's range that both protocols can carry (a proto int32 holds no int64)."""
    if f["type"] == "uint64":
        return []  # every uint64 is valid: gRPC cannot send one out of range
    lo, hi = f["lo"], f["hi"]
    if f["type"] == "float":
        # Far enough from the bound to stay outside it as a 32-bit float.
        return [lo if f["lo_open"] else lo - max(abs(lo) * 0.5, 0.001), hi + max(abs(hi) * 0.5, 0.001)]
    below = int(lo) - 1
    if f["off_alias"] is not None and below == f["off_alias"]:
        below -= 1
    return [v for v in (below, int(hi) + 1) if INT32[0] <= v <= INT32[1]]


def accepted(f):
    """Boundary values every path must take."""
    if f["type"] == "uint64":
        return [0, 2**64 - 1]
    values = [f["hi"]] + ([] if f["lo_open"] else [f["lo"]])
    if f["off_alias"] is not None:
        values.append(f["off_alias"])
    return [int(v) for v in values] if f["type"] == "int32" else values


class Stub:
    def __init__(self, channel):
        def unary(name, req, resp):
            return channel.unary_unary(f"/rill.v1.Rill/{name}", request_serializer=req.SerializeToString,
                                       response_deserializer=resp.FromString)
        self.Generate = channel.unary_stream("/rill.v1.Rill/Generate",
                                             request_serializer=pb.GenerateRequest.SerializeToString,
                                             response_deserializer=pb.GenerateResponse.FromString)
        self.Session = channel.stream_stream("/rill.v1.Rill/Session",
                                             request_serializer=pb.SessionRequest.SerializeToString,
                                             response_deserializer=pb.SessionResponse.FromString)
        self.CreateSession = unary("CreateSession", pb.SessionOptions, pb.SessionInfo)
        self.DeleteSession = unary("DeleteSession", pb.DeleteSessionRequest, pb.DeleteSessionResponse)


class ServerCase(unittest.TestCase):
    """One server per class; helpers that reduce every answer to (class, message, param)."""
    server_args = ()

    @classmethod
    def setUpClass(cls):
        cls.server = Server(*cls.server_args)
        cls.channel = grpc.insecure_channel(f"127.0.0.1:{cls.server.grpc_port}",
                                            options=[("grpc.enable_http_proxy", 0)])
        cls.stub = Stub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        assert cls.server.stop() == 0, "rill-server did not exit 0 on SIGTERM"

    def http(self, path, body):
        status, data = self.server.post(path, body)
        reply = json.loads(data) if data else {}
        if status in (200, 201):
            return ("ok", None, None), reply
        err = reply.get("error", {})
        return (f"{status // 100}xx", err.get("message"), err.get("param")), reply

    @staticmethod
    def grpc_error(e):
        param = dict(e.trailing_metadata() or ()).get("error-param")
        return ("4xx" if e.code() == grpc.StatusCode.INVALID_ARGUMENT else str(e.code()), e.details(), param)

    def generate(self, req):
        """(answer, token ids) of a Generate call."""
        ids = []
        try:
            for msg in self.stub.Generate(req, timeout=60):
                ids += list(msg.token_ids)
        except grpc.RpcError as e:
            return self.grpc_error(e), None
        return ("ok", None, None), ids

    def create_session(self, sampling=None):
        opts = pb.SessionOptions(cache=pb.CachePolicy(kind=pb.CachePolicy.KIND_STREAMING, n_sink=4, window=32))
        for k, v in (sampling or {}).items():
            setattr(opts.sampling, k, v)
        try:
            info = self.stub.CreateSession(opts, timeout=30)
        except grpc.RpcError as e:
            return self.grpc_error(e), None
        self.addCleanup(self.stub.DeleteSession, pb.DeleteSessionRequest(session_id=info.options.session_id))
        return ("ok", None, None), info

    def grpc_turn(self, session_id, turn):
        """(answer, token ids) of one turn on a Session call attached to `session_id`."""
        reqs = [pb.SessionRequest(open=pb.SessionOpen(attach_session_id=session_id)), pb.SessionRequest(turn=turn)]
        ids = []
        try:
            for msg in self.stub.Session(iter(reqs), timeout=60):
                if msg.HasField("error"):
                    code = grpc.StatusCode.INVALID_ARGUMENT.value[0]
                    return ("4xx" if msg.error.code == code else str(msg.error.code), msg.error.message, None), None
                if msg.HasField("turn"):
                    ids += list(msg.turn.token_ids)
        except grpc.RpcError as e:
            return self.grpc_error(e), None
        return ("ok", None, None), ids

    def http_session(self, **fields):
        answer, s = self.http("/v1/sessions", {"cache": POLICY, **fields})
        if answer[0] == "ok":
            self.addCleanup(self.server.request, "DELETE", f"/v1/sessions/{s['id']}")
        return answer, s


class AgreementTest(ServerCase):
    def answers(self, name, value):
        """The answer of every path to `name: value`, keyed by path."""
        out = {}
        body = {"prompt": "ROMEO:", "max_tokens": 1, name: value}
        out["http completions"] = self.http("/v1/completions", body)[0]
        req = pb.GenerateRequest(text="ROMEO:", max_tokens=1)
        setattr(req.sampling, name, value)
        out["grpc Generate"] = self.generate(req)[0]
        out["http POST /v1/sessions"] = self.http_session(**{name: value})[0]
        out["grpc CreateSession"] = self.create_session({name: value})[0]
        _, s = self.http_session()
        turn = {"session_id": s["id"], "prompt": "ROMEO:", "max_tokens": 1, name: value}
        out["http session turn"] = self.http("/v1/completions", turn)[0]
        _, info = self.create_session()
        t = pb.SessionTurn(text="ROMEO:", max_tokens=1)
        setattr(t.sampling, name, value)
        answer = self.grpc_turn(info.options.session_id, t)[0]
        out["grpc session turn"] = answer[:2] + (name if answer[0] != "ok" else None,)  # TurnError has no param
        return out

    def test_every_field_out_of_range_gets_the_same_answer_everywhere(self):
        self.assertGreaterEqual(len(FIELDS), 8)
        tested = 0
        for f in FIELDS:
            for value in out_of_range(f):
                with self.subTest(field=f["name"], value=value):
                    answers = self.answers(f["name"], value)
                    reference = answers["http completions"]
                    self.assertEqual(reference[0], "4xx", answers)
                    self.assertEqual(reference[2], f["name"], answers)
                    self.assertIn(f"'{f['name']}' must be", reference[1])
                    for path, answer in answers.items():
                        self.assertEqual(answer, reference, f"{path} differs: {answers}")
                    tested += 1
        self.assertGreaterEqual(tested, 12)

    def test_every_field_at_its_bounds_is_accepted_everywhere(self):
        for f in FIELDS:
            for value in accepted(f):
                with self.subTest(field=f["name"], value=value):
                    answers = self.answers(f["name"], value)
                    self.assertTrue(all(a[0] == "ok" for a in answers.values()), answers)

    def test_other_generation_fields_agree(self):
        cases = [  # (HTTP body fields, GenerateRequest fields)
            ({"max_tokens": 2**24 + 1}, {"max_tokens": 2**24 + 1}),
            ({"max_tokens": -1}, {"max_tokens": -1}),
            ({"min_tokens": -1}, {"min_tokens": -1}),
            ({"stop": ["x"] * 17}, {"stop": ["x"] * 17}),
            ({"stop": ["x" * 257]}, {"stop": ["x" * 257]}),
            ({"stop_token_ids": [10**6]}, {"stop_token_ids": [10**6]}),
            ({"stop": [""]}, {"stop": [""]}),  # dropped by both (gRPC refused it, HTTP dropped it)
        ]
        for http_fields, grpc_fields in cases:
            with self.subTest(fields=http_fields):
                body = {"prompt": "ROMEO:", "max_tokens": 1, **http_fields}
                http_answer = self.http("/v1/completions", body)[0]
                grpc_answer = self.generate(pb.GenerateRequest(text="ROMEO:", **{"max_tokens": 1, **grpc_fields}))[0]
                self.assertEqual(http_answer, grpc_answer)

    def test_cache_policies_are_checked_alike(self):
        http_answer = self.http("/v1/completions", {"prompt": "a", "cache": {"policy": "streaming", "window": 0}})[0]
        req = pb.GenerateRequest(text="a", cache=pb.CachePolicy(kind=pb.CachePolicy.KIND_STREAMING, window=0))
        self.assertEqual(self.generate(req)[0], http_answer)
        self.assertEqual(http_answer[2], "cache.window")
        # An unknown kind (proto3 enums are open) was taken as KIND_FULL; HTTP refuses "lru".
        answer = self.generate(pb.GenerateRequest(text="a", cache=pb.CachePolicy(kind=7)))[0]
        self.assertEqual(answer[0], "4xx")
        self.assertEqual(answer[2], "cache.kind")
        self.assertEqual(self.http("/v1/completions", {"prompt": "a", "cache": {"policy": "lru"}})[0][0], "4xx")


# The model's generation defaults: a copy of the default model (its files linked) with its own
# generation_config.json. Every value differs from OpenAI's so a request that leaves them unset
# shows which applied.
GENERATION_CONFIG = {"do_sample": True, "temperature": 0.5, "top_k": 5, "top_p": 0.9, "min_p": 0.05,
                     "repetition_penalty": 1.3, "max_new_tokens": 64}
TYPES = {f["name"]: f["type"] for f in FIELDS}


def typed(name, value):
    """A value as its field's type (the proto setters take no 0.0 for an integer field)."""
    return value if TYPES[name] == "float" else int(value)


OPENAI = {f["name"]: typed(f["name"], f["default"]) for f in FIELDS}
SEED = 1234


def make_model_dir():
    src = os.path.join(SOURCE_DIR, "models/rill-shakespeare")
    d = tempfile.mkdtemp(prefix="rill_gen_model_")
    for name in os.listdir(src):
        if name != "generation_config.json":
            os.symlink(os.path.join(src, name), os.path.join(d, name))
    with open(os.path.join(d, "generation_config.json"), "w") as f:
        json.dump(GENERATION_CONFIG, f)
    return d


class ModelDefaultsBase(ServerCase):
    model_dir = None
    expected = {}  # the resolved defaults this server must apply

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()
        shutil.rmtree(cls.model_dir, ignore_errors=True)

    def assert_sampling(self, got):
        for name, value in self.expected.items():
            self.assertTrue(math.isclose(float(got[name]), float(value), rel_tol=1e-6), f"{name}: {got} vs {self.expected}")

    def completions_ids(self, **fields):
        body = {"prompt": "ROMEO:", "max_tokens": 24, "ignore_eos": True, "return_token_ids": True, "seed": SEED,
                **fields}
        answer, reply = self.http("/v1/completions", body)
        self.assertEqual(answer[0], "ok", reply)
        return reply["choices"][0]["token_ids"]

    def chat_ids(self, **fields):
        body = {"messages": [{"role": "user", "content": "Speak."}], "max_tokens": 24, "ignore_eos": True,
                "return_token_ids": True, "seed": SEED, **fields}
        answer, reply = self.http("/v1/chat/completions", body)
        self.assertEqual(answer[0], "ok", reply)
        return reply["choices"][0]["token_ids"]

    def generate_ids(self, **fields):
        req = pb.GenerateRequest(text="ROMEO:", max_tokens=24, ignore_eos=True)
        req.sampling.seed = SEED
        for k, v in fields.items():
            setattr(req.sampling, k, v)
        answer, ids = self.generate(req)
        self.assertEqual(answer[0], "ok", answer)
        return ids

    def session_turn_ids(self, **fields):
        """The first turn of a session created with `fields` (its defaults), over HTTP and gRPC."""
        _, s = self.http_session(**fields)
        answer, reply = self.http("/v1/completions", {"session_id": s["id"], "prompt": "ROMEO:", "max_tokens": 24,
                                                      "ignore_eos": True, "return_token_ids": True, "seed": SEED})
        self.assertEqual(answer[0], "ok", reply)
        _, info = self.create_session(fields)
        turn = pb.SessionTurn(text="ROMEO:", max_tokens=24, ignore_eos=True)
        turn.sampling.seed = SEED
        answer, grpc_ids = self.grpc_turn(info.options.session_id, turn)
        self.assertEqual(answer[0], "ok", answer)
        self.assertEqual(grpc_ids, reply["choices"][0]["token_ids"])
        return grpc_ids

    def test_sessions_show_the_defaults(self):
        answer, s = self.http_session()
        self.assertEqual(answer[0], "ok")
        self.assert_sampling(s["defaults"])
        _, info = self.create_session()
        self.assert_sampling({f["name"]: getattr(info.options.sampling, f["name"]) for f in FIELDS})

    def test_unset_fields_take_the_defaults_on_every_path(self):
        explicit = {k: v for k, v in self.expected.items() if k != "seed"}
        openai = {k: OPENAI[k] for k in explicit}
        for path in (self.completions_ids, self.chat_ids, self.generate_ids, self.session_turn_ids):
            with self.subTest(path=path.__name__):
                unset = path()
                self.assertEqual(len(unset), 24)
                self.assertEqual(unset, path(**explicit))
                self.assertNotEqual(unset, path(**openai), "the defaults changed nothing: pick other values")
        # The same request gives the same tokens on both protocols.
        self.assertEqual(self.completions_ids(), self.generate_ids())


class ModelDefaultsTest(ModelDefaultsBase):
    """--generation-config auto (the default): the model directory's file."""
    model_dir = make_model_dir()
    server_args = ("--model", model_dir)
    expected = {**OPENAI, **{k: v for k, v in GENERATION_CONFIG.items() if k in OPENAI}}


class ServerOverrideTest(ModelDefaultsBase):
    """--default-sampling over the model's file."""
    model_dir = make_model_dir()
    server_args = ("--model", model_dir, "--default-sampling", json.dumps({"top_k": 3, "presence_penalty": 0.5}))
    expected = {**OPENAI, **{k: v for k, v in GENERATION_CONFIG.items() if k in OPENAI}, "top_k": 3,
                "presence_penalty": 0.5}


class NoModelDefaultsTest(ModelDefaultsBase):
    """--generation-config none: OpenAI's defaults under the override."""
    model_dir = make_model_dir()
    server_args = ("--model", model_dir, "--generation-config", "none", "--default-sampling",
                   json.dumps({"temperature": 0.5}))
    expected = {**OPENAI, "temperature": 0.5}


del ModelDefaultsBase  # a base: its subclasses run its tests with their servers


if __name__ == "__main__":
    unittest.main()
