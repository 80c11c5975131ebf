"""The HTTP server's limits over real sockets (docs/api.md#limits): the connection cap (the
longest-idle connection makes room, busy ones are not dropped and the excess is answered 503),
descriptor exhaustion (no spinning accept loop, a small log, /health still answered), the budget
of buffered request bodies (memory stays bounded, the excess is answered 503), and HTTP/1.0
streams (close-delimited, never chunked)."""
import json
import os
import resource
import select
import socket
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from harness import Server, still_held, wait_until  # noqa: E402


def connect(port, timeout=10):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def read_all(s, timeout=30):
    """Everything until the server closes (or `timeout`)."""
    s.settimeout(timeout)
    data = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    except (socket.timeout, ConnectionResetError):
        pass
    return data


def health(port, timeout=10):
    """The status of GET /health on a new connection, or None."""
    try:
        s = connect(port, timeout)
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        head = read_all(s, timeout).split(b"\r\n", 1)[0]
        s.close()
        return int(head.split()[1]) if head.startswith(b"HTTP/") else None
    except OSError:
        return None


def wait_readable(s, timeout):
    """True when `s` has bytes (or end of file) to read within `timeout` seconds."""
    return bool(select.select([s], [], [], timeout)[0])


def read_response(s, timeout=30, data=b""):
    """One response (headers and its Content-Length body; `data`: what was read of it already),
    without waiting for the server to close."""
    s.settimeout(timeout)
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            return data
        data += chunk
    status, headers, body = split_response(data)
    while len(body) < int(headers.get("content-length", 0)):
        chunk = s.recv(65536)
        if not chunk:
            break
        body += chunk
    return data.partition(b"\r\n\r\n")[0] + b"\r\n\r\n" + body


def split_response(raw):
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (h.split(":", 1) for h in lines[1:])}
    return lines[0], headers, body


def proc_stat(pid):
    """(user + system CPU seconds, resident bytes) of a process."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    with open(f"/proc/{pid}/status") as f:
        rss = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))
    return cpu, rss


class ConnectionCapTest(unittest.TestCase):
    def test_idle_connections_make_room_and_busy_ones_are_refused_cleanly(self):
        server = Server("--max-connections", "8")
        port = server.http_port
        try:
            idle = [connect(port) for _ in range(8)]
            time.sleep(0.3)
            # At the cap: the longest-idle connection makes room for the probe.
            self.assertEqual(health(port), 200)
            self.assertEqual(read_all(idle[0], timeout=5), b"")  # closed by the server
            for s in idle:
                s.close()
            # Eight connections in the middle of a request are never dropped for a new one.
            busy = []
            for attempt in range(8):
                while len(busy) < 8:
                    busy.append(connect(port))
                    busy[-1].sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
                # Longer each time: on a loaded machine the server may read the holders late.
                time.sleep(0.3 * 2 ** min(attempt, 4))
                s = connect(port)
                raw = read_response(s, timeout=5) if wait_readable(s, 5) else b""
                s.close()
                if raw:
                    break
                # A holder the server had not read yet was idle and made room, or one came while the
                # cap was still full of the last phase's connections and got a 503: replace it.
                busy = [b for b in busy if still_held(b) or b.close()]
            status, headers, body = split_response(raw)
            self.assertEqual(status.split()[1], "503", status)
            self.assertEqual(headers.get("connection"), "close")
            self.assertGreaterEqual(int(headers["retry-after"]), 1)
            err = json.loads(body)["error"]
            self.assertEqual(err["type"], "overloaded_error")
            self.assertIn("max_connections", err["message"])
            # The busy ones are still served.
            busy[0].sendall(b"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
            self.assertIn(b" 400 ", read_response(busy[0]).split(b"\r\n", 1)[0])
            for s in busy:
                s.close()
            self.assertTrue(wait_until(lambda: health(port) == 200, timeout=10))
        finally:
            self.assertEqual(server.stop(), 0)

    def test_the_cap_fits_the_descriptor_limit(self):
        def low_fd_limit():
            resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))

        server = Server("--log-level", "info", preexec_fn=low_fd_limit)
        try:
            # 256 descriptors leave room for 95 connections besides the reserve.
            self.assertTrue(any("max_connections 10000 lowered to 95" in line for line in server.stdout_lines))
            conns = [connect(server.http_port) for _ in range(300)]
            self.assertEqual(health(server.http_port), 200)
            for s in conns:
                s.close()
        finally:
            self.assertEqual(server.stop(), 0)


# The sanitizers' runtime needs descriptors of its own (UBSan's vptr check probes memory through a
# pipe and reports a valid object as invalid when it cannot open one; reports go to files it then
# cannot open), so the sanitized run (scripts/test_asan.sh) leaves descriptor exhaustion to the
# plain run.
@unittest.skipIf(os.environ.get("RILL_SANITIZED") == "1",
                 "descriptor exhaustion breaks the sanitizer runtime itself (see above)")
class DescriptorExhaustionTest(unittest.TestCase):
    def test_accept_loop_backs_off_and_health_answers(self):
        server = Server()
        pid, port = server.proc.pid, server.http_port
        try:
            # Leave the server a few descriptors, then open more connections than it can take:
            # accept fails with EMFILE while connections wait in the backlog.
            open_fds = len(os.listdir(f"/proc/{pid}/fd"))
            original = resource.prlimit(pid, resource.RLIMIT_NOFILE)
            resource.prlimit(pid, resource.RLIMIT_NOFILE, (open_fds + 8, original[1]))
            conns = [connect(port) for _ in range(60)]
            time.sleep(1.0)
            lines_before = len(server.stdout_lines)
            cpu_before, _ = proc_stat(pid)
            time.sleep(2.0)
            cpu, _ = proc_stat(pid)
            # The loop that spun wrote ~100,000 lines a second and used half a core.
            self.assertLess(len(server.stdout_lines) - lines_before, 5, server.stdout_lines[-5:])
            self.assertLess(cpu - cpu_before, 0.3, "the accept loop is spinning")
            print(f"exhausted for 2 s: {cpu - cpu_before:.2f} CPU s, {len(server.stdout_lines)} log lines")
            self.assertEqual(health(port, timeout=15), 200)
            self.assertLess(len(server.stdout_lines), 100)
            resource.prlimit(pid, resource.RLIMIT_NOFILE, original)
            for s in conns:
                s.close()
            self.assertTrue(wait_until(lambda: health(port) == 200, timeout=10))
        finally:
            self.assertEqual(server.stop(), 0)


class BufferedBodiesTest(unittest.TestCase):
    CONNECTIONS = 100
    DECLARED = 1_000_000
    SENT = 990_000  # of each body: none of them is complete
    BUDGET = 4 << 20

    def test_unfinished_bodies_stay_within_the_budget(self):
        server = Server("--max-buffered-body-bytes", str(self.BUDGET))
        port = server.http_port
        try:
            _, rss_before = proc_stat(server.proc.pid)
            head = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    b"Content-Length: " + str(self.DECLARED).encode() + b"\r\n\r\n")
            conns = []
            for _ in range(self.CONNECTIONS):
                s = connect(port, timeout=30)
                try:
                    s.sendall(head + b"a" * self.SENT)
                except OSError:
                    pass  # refused and closed before everything was sent
                conns.append(s)
            time.sleep(0.5)
            _, rss = proc_stat(server.proc.pid)
            # Unbounded, the server held every partial body: about 99 MB.
            self.assertLess(rss - rss_before, 30 << 20, f"RSS grew by {(rss - rss_before) >> 20} MiB")
            refused, held = 0, []
            for s in conns:
                s.settimeout(0.2)
                try:
                    data = s.recv(65536)
                except socket.timeout:
                    held.append(s)
                    continue
                except ConnectionResetError:
                    data = b""
                if data.startswith(b"HTTP/1.1 503"):
                    refused += 1
                    err = json.loads(split_response(read_response(s, 5, data))[2])["error"]
                    self.assertEqual(err["type"], "overloaded_error")
                    self.assertIn("max_buffered_body_bytes", err["message"])
            self.assertLessEqual(len(held), self.BUDGET // self.SENT + 1)
            self.assertGreaterEqual(refused, self.CONNECTIONS - len(held) - 5)
            # A held body completes and is answered as usual (not JSON: 400).
            self.assertTrue(held)
            held[0].sendall(b"a" * (self.DECLARED - self.SENT))
            self.assertIn(b" 400 ", read_response(held[0]).split(b"\r\n", 1)[0])
            for s in conns:
                s.close()
            # The budget is free again.
            s = connect(port, timeout=30)
            s.sendall(head + b"a" * self.DECLARED)
            self.assertIn(b" 400 ", read_response(s).split(b"\r\n", 1)[0])
            s.close()
        finally:
            self.assertEqual(server.stop(), 0)


class Http10StreamTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server()

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0

    def stream(self, version):
        body = json.dumps({"prompt": "ROMEO:", "max_tokens": 8, "temperature": 0, "stream": True}).encode()
        s = connect(self.server.http_port, timeout=60)
        s.sendall(f"POST /v1/completions HTTP/{version}\r\nHost: x\r\nContent-Type: application/json\r\n"
                  f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        raw = read_all(s, 60)
        s.close()
        return split_response(raw)

    def test_http10_stream_is_close_delimited(self):
        status, headers, body = self.stream("1.0")
        self.assertTrue(status.startswith("HTTP/1.0 200"), status)
        self.assertNotIn("transfer-encoding", headers)
        self.assertEqual(headers.get("connection"), "close")
        # The same events as an HTTP/1.1 client gets in chunks (greedy: the same text).
        status11, headers11, body11 = self.stream("1.1")
        self.assertTrue(status11.startswith("HTTP/1.1 200"), status11)
        self.assertEqual(headers11.get("transfer-encoding"), "chunked")
        self.assertEqual(stream_text(body), stream_text(dechunk(body11)))
        self.assertTrue(stream_text(body))


def dechunk(body):
    out = b""
    while True:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            return out
        out += rest[:size]
        body = rest[size + 2:]


def stream_text(body):
    """The completion text of an SSE body whose every line is an event (no chunk framing)."""
    events = [line for line in body.decode().split("\n") if line]
    assert events and all(e.startswith("data: ") for e in events), body[:200]
    assert events[-1] == "data: [DONE]", events[-1]
    chunks = [json.loads(e[6:]) for e in events[:-1]]
    return "".join(c["choices"][0]["text"] for c in chunks if c["choices"])

if __name__ == "__main__":
    unittest.main(verbosity=2)
