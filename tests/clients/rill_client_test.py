"""rill-client against the real rill-server (CPU, loopback, ephemeral ports): the same greedy text
over HTTP and gRPC, streamed text equal to --json's, chat, stop strings, and the exit codes for an
unreachable server (3), an overloaded one (4) and a bad request (5)."""
import json
import os
import socket
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../server"))
from harness import SOURCE_DIR, Server  # noqa: E402

CLIENT = os.environ.get("RILL_CLIENT", os.path.join(SOURCE_DIR, "build/clients/rill_client/rill-client"))


def client(*args, stdin=None):
    """Runs rill-client; returns (exit code, stdout, stderr)."""
    p = subprocess.run([CLIENT, *args], input=stdin, capture_output=True, text=True, timeout=30)
    return p.returncode, p.stdout, p.stderr


def client_json(*args):
    rc, out, err = client(*args, "--json")
    assert rc == 0, (args, rc, err)
    return json.loads(out)


def free_port():
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_generation(http, grpc):
    greedy = ["--prompt", "ROMEO:", "--temperature", "0", "--max-tokens", "16"]
    # (1) the same greedy text over both protocols, 16 tokens, finish_reason length.
    a = client_json("--http", http, *greedy)
    b = client_json("--grpc", grpc, *greedy)
    for r in (a, b):
        assert r["finish_reason"] == "length", r
        assert r["usage"]["completion_tokens"] == 16, r
        assert r["usage"]["prompt_tokens"] > 0, r
        assert r["timings"]["e2e_s"] >= r["timings"]["ttft_s"] > 0, r
    assert a["text"] == b["text"] and a["text"], (a, b)
    assert len(b["token_ids"]) == 16, b
    assert "server_timings" in b, b

    # (2) streamed stdout equals the --json text; usage and timings on stderr.
    for flag, target in (("--http", http), ("--grpc", grpc)):
        rc, out, err = client(flag, target, *greedy)
        assert rc == 0, err
        assert out == a["text"], (flag, out, a["text"])
        assert "finish_reason=length" in err and "completion_tokens=16" in err and "ttft=" in err, err
        if flag == "--grpc":
            assert "[server:" in err, err

    # (3) chat with one --prompt message over both (with a system message over HTTP).
    chat = ["--chat", "--prompt", "Who are you?", "--temperature", "0", "--max-tokens", "8"]
    c_http = client_json("--http", http, *chat)
    c_grpc = client_json("--grpc", grpc, *chat)
    assert c_http["text"] == c_grpc["text"] and c_http["usage"]["completion_tokens"] == 8, (c_http, c_grpc)
    sys_chat = client_json("--http", http, *chat, "--system", "You are brief.")
    assert sys_chat["usage"]["prompt_tokens"] > c_http["usage"]["prompt_tokens"], (sys_chat, c_http)
    # Interactive chat: two lines of stdin, two answers, the history growing.
    rc, out, err = client("--grpc", grpc, "--chat", "--temperature", "0", "--max-tokens", "4",
                          stdin="Who are you?\nAnd then?\n")
    assert rc == 0, err
    summaries = [line for line in err.splitlines() if line.startswith("[finish_reason=")]
    assert len(summaries) == 2, err
    prompt_tokens = [int(s.split("prompt_tokens=")[1].split()[0]) for s in summaries]
    assert prompt_tokens[1] > prompt_tokens[0], prompt_tokens

    # (6) a stop string taken from the greedy text ends it with finish_reason stop, not returned.
    words = a["text"].split()
    assert len(words) >= 2, a
    stop = words[1]
    for flag, target in (("--http", http), ("--grpc", grpc)):
        r = client_json(flag, target, *greedy, "--stop", stop, "--stop", "never-in-the-text")
        assert r["finish_reason"] == "stop", (flag, r)
        assert stop not in r["text"] and a["text"].startswith(r["text"]), (flag, r, stop)

    # (5) bad requests pass through to the server: exit 5 with its message.
    for flag, target, bad, param in (("--http", http, ["--max-tokens", "-1"], "max_tokens"),
                                     ("--grpc", grpc, ["--max-tokens", "-1"], "max_tokens"),
                                     ("--http", http, ["--temperature", "-1"], "temperature"),
                                     ("--grpc", grpc, ["--temperature", "-1"], "temperature")):
        rc, out, err = client(flag, target, "--prompt", "a", *bad)
        assert rc == 5, (flag, bad, rc, err)
        assert err.startswith("rill-client: server error") and param in err, err
        assert ("HTTP 400" in err) if flag == "--http" else ("INVALID_ARGUMENT" in err), err


def check_flags_and_unreachable():
    # (4) nothing listening: exit 3, "cannot reach HOST:PORT".
    port = free_port()
    for flag in ("--http", "--grpc"):
        rc, out, err = client(flag, f"127.0.0.1:{port}", "--prompt", "a")
        assert rc == 3, (flag, rc, err)
        assert f"rill-client: cannot reach 127.0.0.1:{port}: " in err, err
    # Bad flags: CLI11's message, exit 2.
    for args in (["--prompt", "a"], ["--http", "h:1", "--grpc", "h:2", "--prompt", "a"],
                 ["--http", "h:1"], ["--http", "h:1", "--prompt", "a", "--max-tokens", "ten"],
                 ["--http", "h:1", "--prompt", "a", "--cache", "lru"]):
        rc, out, err = client(*args)
        assert rc == 2 and err, (args, rc, err)


def check_overloaded():
    # A queue that holds at most one prompt token: every real prompt is refused for overload; exit 4
    # with the retry hint. (--max-queued-requests 0 is refused at start since the limits issue.)
    server = Server("--max-queued-prompt-tokens", "1")
    try:
        rc, out, err = client("--http", f"127.0.0.1:{server.http_port}", "--prompt", "ROMEO: a longer prompt")
        assert rc == 4 and "HTTP 503" in err and "retry after" in err, (rc, err)
        rc, out, err = client("--grpc", f"127.0.0.1:{server.grpc_port}", "--prompt", "ROMEO: a longer prompt")
        assert rc == 4 and "RESOURCE_EXHAUSTED" in err and "retry after" in err and " ms" in err, (rc, err)
    finally:
        assert server.stop() == 0


def main():
    check_flags_and_unreachable()
    server = Server()
    try:
        check_generation(f"127.0.0.1:{server.http_port}", f"127.0.0.1:{server.grpc_port}")
    finally:
        assert server.stop() == 0
    check_overloaded()
    print("rill-client tests passed")


if __name__ == "__main__":
    main()
