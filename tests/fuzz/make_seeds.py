#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz harnesses (tests/fuzz/corpus/<harness>/): a few small,
valid inputs per harness that reach deep into the code, from which libFuzzer mutates. The gRPC
seeds are serialized with `protoc --encode` (Debian protobuf-compiler). Re-run after changing a
seed here; the files are committed so the fuzz run needs no generator.

  tests/fuzz/make_seeds.py
"""
import json
import os
import struct
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = os.path.join(ROOT, "tests", "fuzz", "corpus")


def write(harness, name, data):
    d = os.path.join(CORPUS, harness)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def body(obj):
    return json.dumps(obj, separators=(",", ":"))


# ---- Request bodies (HTTP) ----

CHAT = {"model": "rill-shakespeare", "messages": [
    {"role": "system", "content": "A scene in Verona."},
    {"role": "user", "content": "Good morrow!", "name": "juliet"},
    {"role": "assistant", "content": [{"type": "text", "text": "And to thee."}]},
    {"role": "user", "content": "Wherefore?"}],
    "max_tokens": 8, "temperature": 0.7, "top_p": 0.9, "top_k": 40, "min_p": 0.05,
    "stop": ["\n\n", "JULIET"], "seed": 7, "logprobs": True, "top_logprobs": 3,
    "stream": True, "stream_options": {"include_usage": True}}
COMPLETION = {"model": "rill-shakespeare", "prompt": "ROMEO:\nBut soft", "max_tokens": 4,
              "repetition_penalty": 1.1, "presence_penalty": 0.5, "frequency_penalty": 0.2,
              "stop_token_ids": [0], "logprobs": 2, "priority": -3, "ignore_eos": False,
              "return_token_ids": True, "skip_special_tokens": False}
STREAMING = {"prompt": [[5, 6, 7, 8]], "max_tokens": 3, "min_tokens": 1,
             "cache": {"policy": "streaming", "n_sink": 4, "window": 64}}
SESSION_TURN = {"session_id": "s", "messages": [{"role": "user", "content": "Speak."}],
                "max_tokens": 2}
SESSION_TEXT = {"session_id": "s", "prompt": "Once more", "max_completion_tokens": 2}
SESSION_CREATE = {"id": "fuzz-1", "cache": {"policy": "streaming", "n_sink": 4, "window": 128},
                  "temperature": 0, "max_tokens": 16}

BODIES = {"chat": CHAT, "completion": COMPLETION, "streaming": STREAMING,
          "session_turn": SESSION_TURN, "session_text": SESSION_TEXT,
          "session_create": SESSION_CREATE}


def http(method, target, payload=None, headers=(), version="1.1"):
    lines = [f"{method} {target} HTTP/{version}", "Host: localhost"] + list(headers)
    data = payload if payload is not None else ""
    if payload is not None:
        lines += ["Content-Type: application/json", f"Content-Length: {len(data.encode())}"]
    return "\r\n".join(lines) + "\r\n\r\n" + data


def chunked(method, target, payload, sizes):
    out, i = [], 0
    for n in sizes:
        part = payload[i:i + n]
        if not part:
            break
        out.append(f"{len(part.encode()):x};ext=1\r\n{part}\r\n")
        i += n
    if i < len(payload):
        out.append(f"{len(payload[i:].encode()):x}\r\n{payload[i:]}\r\n")
    head = (f"{method} {target} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\n\r\n")
    return head + "".join(out) + "0\r\nX-Trailer: 1\r\n\r\n"


def http_seeds():
    step_all, step_small = b"\x00", b"\x07"
    write("http_request", "completion", step_all + http("POST", "/v1/completions", body(COMPLETION)).encode())
    write("http_request", "chat_split_reads", step_small + http("POST", "/v1/chat/completions?x=1", body(CHAT)).encode())
    write("http_request", "chat_chunked", step_all + chunked("POST", "/v1/chat/completions", body(CHAT), [5, 17, 40]).encode())
    write("http_request", "session_turn", step_all + http("POST", "/v1/chat/completions", body(SESSION_TURN)).encode())
    pipelined = (http("GET", "/health") + http("GET", "/v1/sessions/s") +
                 http("POST", "/v1/sessions", body(SESSION_CREATE)) +
                 http("POST", "/tokenize", body({"prompt": "O Romeo", "add_special_tokens": False})) +
                 http("POST", "/detokenize", body({"tokens": [1, 2, 3]})) +
                 http("DELETE", "/v1/sessions/nope") + http("PUT", "/v1/models") +
                 http("POST", "/v1/completions", body(STREAMING), headers=["Connection: keep-alive"]))
    write("http_request", "pipelined", step_all + pipelined.encode())
    write("http_request", "http10", b"\x03" + http("POST", "/v1/completions", body(SESSION_TEXT), version="1.0").encode())
    write("http_request", "too_large", step_all + (
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 999999\r\n\r\n{").encode())
    write("http_request", "bad_chunk", step_all + (
        "POST /tokenize HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffff\r\n").encode())


def openai_seeds():
    for name, b in BODIES.items():
        write("openai_request", name, body(b))
    write("openai_request", "parts", body({"messages": [{"role": "user", "content": [
        {"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}], "n": 1, "best_of": 1}))
    write("openai_request", "nested", body({"prompt": "x", "metadata": [[[[{"a": [1]}]]]]}))


# ---- gRPC messages (protoc --encode) ----

GRPC = {
    # byte 0 even: rill.v1.GenerateRequest
    "generate_text": (0, "GenerateRequest", '''
        request_id: "r1" text: "ROMEO:\\nBut soft" max_tokens: 4 min_tokens: 1 logprobs: 3
        sampling { temperature: 0.7 top_k: 40 top_p: 0.9 min_p: 0.05 repetition_penalty: 1.1
                   presence_penalty: 0.5 frequency_penalty: 0.2 seed: 7 }
        stop: "\\n\\n" stop_token_ids: 0 priority: -1 deadline_ms: 5000 include_special_tokens: true'''),
    "generate_chat": (0, "GenerateRequest", '''
        messages { messages { role: "system" content: "Verona." }
                   messages { role: "user" content: "Good morrow!" } }
        cache { kind: KIND_STREAMING n_sink: 4 window: 64 } ignore_eos: true'''),
    "generate_ids": (0, "GenerateRequest", '''token_ids { ids: 5 ids: 6 ids: 7 } max_tokens: 2'''),
    # byte 0 odd: rill.v1.SessionRequest
    "session_create": (1, "SessionRequest", '''
        open { create { session_id: "g1" cache { kind: KIND_STREAMING n_sink: 4 window: 128 }
                        sampling { temperature: 0 } max_tokens: 8 } }'''),
    "session_attach": (1, "SessionRequest", '''open { attach_session_id: "s" }'''),
    "session_turn_chat": (1, "SessionRequest", '''
        turn { messages { messages { role: "user" content: "Speak." } } max_tokens: 2
               sampling { top_p: 0.5 } stop: "." logprobs: 1 }'''),
    "session_turn_text": (1, "SessionRequest", '''turn { request_id: "t" text: "Once more" }'''),
    "session_turn_ids": (1, "SessionRequest", '''turn { token_ids { ids: 9 ids: 10 } min_tokens: 1 }'''),
}


def grpc_seeds():
    proto_dir = os.path.join(ROOT, "proto")
    for name, (selector, message, text) in GRPC.items():
        wire = subprocess.run(
            ["protoc", f"--proto_path={proto_dir}", f"--encode=rill.v1.{message}", "rill/v1/rill.proto"],
            input=text.encode(), capture_output=True, check=True).stdout
        write("grpc_request", name, bytes([selector]) + wire)


# ---- Jinja, tokenizer, model config, safetensors ----

def jinja_seeds():
    # The fixtures' templates are passed as a second corpus directory; these cover constructs
    # they lack, and the template + NUL + messages form.
    write("jinja", "constructs", '''{%- macro m(a, b=2) -%}{{ a ~ b }}{%- endmacro -%}
{%- set ns = namespace(n=0) -%}
{%- for x in messages if x.role != 'tool' recursive -%}{%- set ns.n = ns.n + 1 -%}
{{ loop.index }}:{{ x.content | default('') | trim | upper }}{% if not loop.last %},{% endif %}
{%- else -%}none{%- endfor -%}
{{ m(ns.n) }}{{ [3, 1, 2] | sort | join('-') }}{{ {'k': 'v'} | tojson }}{{ "%s-%d" % ('a', 3) }}
{%- if tools is defined and tools %}{{ tools | length }}{% elif bos_token %}{{ bos_token }}{% endif -%}
{{ 'abc'[1:] }}{{ range(3) | list }}{{ raise_exception('done') if false }}''')
    write("jinja", "with_messages", '''{% for m in messages %}<|{{ m['role'] }}|>{{ m.content }}{% endfor %}'''
          '\0' + body({"messages": [{"role": "user", "content": "hi"},
                                    {"role": "assistant", "content": None,
                                     "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]}],
                       "tools": [{"type": "function", "function": {"name": "f"}}],
                       "extra": {"enable_thinking": False}}))
    write("jinja", "whitespace", "{#- c -#}\n  {%- if true +%}\n x {%+ endif %}\r\n{{- 'y' -}}  \n")


def tokenizer_seeds():
    texts = {"ascii": "ROMEO:\nBut soft, what light through yonder window breaks?\n\n",
             "unicode": "Zürich — ça va? 日本語 🙂 \t\r\n  ",
             "special": "<|endoftext|>hello<|im_start|> <s></s>",
             "invalid_utf8": b"ab\xff\xfe\xc3(\xe2\x82",
             "digits": "12345 67.89 0x1F"}
    for i, (name, text) in enumerate(texts.items()):
        raw = text if isinstance(text, bytes) else text.encode()
        # byte 0: tokenizer i, add_special (0x10) and skip_special (0x20) varied
        write("tokenizer", name, bytes([(i % 6) | (0x10 if i % 2 else 0) | (0x20 if i % 3 == 0 else 0)]) + raw)


def model_config_seeds():
    write("model_config", "llama3_scaling", body({
        "architectures": ["LlamaForCausalLM"], "vocab_size": 128, "hidden_size": 64,
        "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "max_position_embeddings": 256, "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
        "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
        "eos_token_id": [1, 2], "bos_token_id": 0, "torch_dtype": "bfloat16"}))
    write("model_config", "neox", body({
        "architectures": ["GPTNeoXForCausalLM"], "vocab_size": 64, "hidden_size": 32,
        "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4,
        "rotary_pct": 0.5, "rotary_emb_base": 10000, "use_parallel_residual": False,
        "hidden_act": "gelu_new", "layer_norm_eps": 1e-5, "dtype": "float16"}))
    # Found by fuzzing (tests/engine/loader_test.cc): ints out of range, a huge rotary factor.
    write("model_config", "regress_int_range", body({
        "architectures": ["MistralForCausalLM"], "vocab_size": 8, "hidden_size": 8,
        "intermediate_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
        "num_key_value_heads": 1e300, "partial_rotary_factor": 1e300, "sliding_window": -1e300}))


def safetensors_file(tensors, metadata=None):
    header, data = {}, b""
    if metadata:
        header["__metadata__"] = metadata
    for name, (dtype, shape, payload) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(payload)]}
        data += payload
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data


def safetensors_seeds():
    write("safetensors", "two_tensors", safetensors_file({
        "w": ("F32", [2, 2], struct.pack("<4f", 1, 2, 3, 4)),
        "b": ("BF16", [3], b"\x80\x3f" * 3),
        "e": ("F16", [0, 5], b"")}, {"format": "pt"}))
    # Found by fuzzing (tests/engine/loader_test.cc): an element count that overflows int64.
    write("safetensors", "regress_shape_overflow", safetensors_file({
        "w": ("F32", [1 << 32, 1 << 32], b"")}))


def grammar_seeds():
    # Byte 0: the language (0 JSON schema, 1 json_object, 2 regex, 3 choice, 4 GBNF); the spec;
    # a NUL; one byte per generated token (which allowed token to take).
    picks = bytes(range(1, 40))
    schema = body({"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 8},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2},
        "next": {"$ref": "#"}}, "required": ["name", "age"]})
    write("grammar", "schema", b"\x00" + schema.encode() + b"\x00" + picks)
    write("grammar", "json_object", b"\x01\x00" + picks)
    write("grammar", "regex", b"\x02[a-c]{2,4}(x|yz)+\\d?\x00" + picks)
    write("grammar", "choice", b"\x03yes\nno\nmaybe\x00" + picks)
    write("grammar", "gbnf", b'\x04root ::= "(" expr ")"\nexpr ::= [0-9]+ | root\n\x00' + picks)
    tagged = json.dumps({"alternatives": [
        {"tag": "get_weather[ARGS]", "schema": {"type": "object", "properties": {
            "city": {"type": "string"}}, "required": ["city"]}},
        {"tag": "search[ARGS]", "schema": {"type": "object"}}], "separator": "[TOOL_CALLS]"})
    write("grammar", "tagged_json", b"\x05" + tagged.encode() + b"\x00" + picks)
    # Repetitions too long to inline (hoisted bodies, expanded at their call sites): a bounded
    # string followed by another property, and a regex repeat.
    bounded = body({"type": "object", "properties": {
        "body": {"type": "string", "minLength": 1000, "maxLength": 1002},
        "n": {"type": "integer"}}, "required": ["body", "n"]})
    write("grammar", "bounded_string", b"\x00" + bounded.encode() + b"\x00" + picks * 8)
    write("grammar", "bounded_regex", b"\x02(ab|c){5200,5204}x?\x00" + picks * 8)


def toolcall_seeds():
    # Byte 0: the family (% 4: Hermes, Llama-3 JSON, Mistral, Mistral v11), bit 2 parallel calls,
    # bits 3-5 the
    # piece size; then the reply.
    write("toolcall", "hermes", b"\x04" + b'<tool_call>\n{"name": "get_weather", "arguments": '
          b'{"city": "Paris"}}\n</tool_call>')
    write("toolcall", "llama3", b"\x0d" + b'<|python_tag|>{"name": "search", "parameters": {}}; '
          b'{"name": "get_weather", "parameters": {"city": "Oslo"}}')
    write("toolcall", "mistral", b"\x16" + b'[TOOL_CALLS][{"name": "get_weather", "arguments": '
          b'{"city": "Rome"}}]')
    write("toolcall", "mistral_v11", b"\x1f" + b'Sure. [TOOL_CALLS]get_weather[ARGS]{"city": "Rome"}'
          b'[TOOL_CALLS]search[ARGS]{}')
    write("toolcall", "text", b"\x00Some text with <tool_call> in the middle and no call.")


def main():
    http_seeds()
    openai_seeds()
    grpc_seeds()
    jinja_seeds()
    tokenizer_seeds()
    model_config_seeds()
    safetensors_seeds()
    grammar_seeds()
    toolcall_seeds()
    return 0


if __name__ == "__main__":
    sys.exit(main())
