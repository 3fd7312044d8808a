"""Starts `chunkserve serve` on a free loopback port for a test and stops it."""
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import unittest

import openai


class Server:
    """A chunkserve server process. `url` is http://127.0.0.1:PORT; `log` the stderr lines so far."""

    def __init__(self, binary, model, *args, env=None, preexec=None):
        # $CHUNKSERVE_SERVER_ARGS adds options to every server (the
        # ThreadSanitizer run keeps the kernels on one thread).
        extra = os.environ.get("CHUNKSERVE_SERVER_ARGS", "").split()
        # A small KV pool: it is touched at start-up, and tests start many servers.
        if "--kv-memory" not in args:
            extra += ["--kv-memory", "384M"]
        # A constraint compiles in a child at the lowest priority within 3x
        # its CPU budget in wall time; on a CI host whose two cores run two
        # tests, the default's 30 s went by (a CI mimic, 2026-11-28). Time must not
        # decide a test: a generous budget, unless the test sets its own.
        if "--grammar-budget" not in args:
            extra += ["--grammar-budget", "120"]
        cmd = [binary, "serve", "-m", model, "--port", "0", *args, *extra]
        self.proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})},
                                     preexec_fn=preexec)
        self.log = []
        self.port = None
        ready = threading.Event()

        def read():
            for line in self.proc.stderr:
                self.log.append(line.rstrip("\n"))
                m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
                if m:
                    self.port = int(m.group(1))
                    ready.set()
            ready.set()

        self.reader = threading.Thread(target=read, daemon=True)
        self.reader.start()
        if not ready.wait(120) or self.port is None:
            self.proc.kill()
            raise RuntimeError("server did not start:\n" + "\n".join(self.log))
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self, sig=signal.SIGTERM, timeout=60):
        """Signals the server; returns its exit status. A failed server's
        stderr (a sanitizer's report, say) is printed, or CI would show only
        the status."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            status = self.proc.wait(timeout)
        finally:
            self.reader.join(5)
        if not self.reader.is_alive():
            self.proc.stderr.close()
        if status not in (0, -sig):
            print(f"server exited with status {status}; its last stderr lines:", file=sys.stderr)
            print("\n".join(self.log[-300:]), file=sys.stderr)
        return status

    def wait_for_log(self, pattern, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if any(re.search(pattern, l) for l in self.log):
                return True
            time.sleep(0.05)
        return False


def wait_until(check, timeout=15.0):
    """Polls check() every 50 ms until it is true or `timeout` seconds pass
    (bounded); returns its last value. For state that settles a moment after
    an answer (events sent after a step, a router's health checks)."""
    deadline = time.time() + timeout
    while True:
        v = check()
        if v or time.time() > deadline:
            return v
        time.sleep(0.05)


def host_port(url):
    """(host, port) of a server's http://HOST:PORT url."""
    host, port = url.replace("http://", "").split(":")
    return host, int(port)


def connect(url, timeout=300):  # ThreadSanitizer's build is slow
    return http.client.HTTPConnection(*host_port(url), timeout=timeout)


def raw(url, method, path, body=None, headers=None):
    """(status, headers, parsed JSON or text) of one HTTP request (JSON content type unless headers say)."""
    conn = connect(url)
    data = body.encode() if isinstance(body, str) else body
    conn.request(method, path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
    r = conn.getresponse()
    text = r.read().decode()
    conn.close()
    try:
        return r.status, dict(r.getheaders()), json.loads(text)
    except ValueError:
        return r.status, dict(r.getheaders()), text


class Stream:
    """A streamed POST whose events a thread reads as they come, so the
    server never holds it back for unread events (a paused stream frees its
    place in the batch). `status` is the HTTP status; `events` the data lines
    so far; close() hangs up, which cancels the request."""

    def __init__(self, url, path, body):
        self.conn = connect(url)
        self.conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        self.response = self.conn.getresponse()
        self.status = self.response.status
        self.events = []
        self.changed = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        try:
            while True:
                line = self.response.readline()
                if not line:
                    break
                if line.startswith(b"data: "):
                    with self.changed:
                        self.events.append(line[6:].decode().strip())
                        self.changed.notify_all()
        except (OSError, ValueError, http.client.HTTPException):
            pass  # hung up by close()

    def wait_events(self, n, timeout=120):
        """Whether n events came within `timeout` seconds."""
        with self.changed:
            return self.changed.wait_for(lambda: len(self.events) >= n, timeout)

    def close(self):
        """Hangs up (again: nothing)."""
        sock = self.conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.reader.join(60)
        self.conn.close()


# Tests that spend minutes under ThreadSanitizer on one thread's work
# (encoding a Prompt Cache schema, decoding long answers) and add no
# concurrency the others lack: the sanitizer run sets CHUNKSERVE_TSAN_LIGHT=1
# and skips them (the release run has them); TSAN_LIGHT says so to others.
TSAN_LIGHT = os.environ.get("CHUNKSERVE_TSAN_LIGHT") == "1"


def metric(url, name, *labels):
    """The sum of a metric's samples whose labels hold every one of `labels` (route="...", code="...")."""
    _, _, text = raw(url, "GET", "/metrics")
    total = 0.0
    for line in text.splitlines():
        if (line.startswith(name + " ") or line.startswith(name + "{")) and all(l in line for l in labels):
            total += float(line.rsplit(" ", 1)[1])
    return total


def heavy_under_tsan_because(reason):
    return unittest.skipIf(TSAN_LIGHT,
                           reason + ": minutes under ThreadSanitizer; the release run covers it")


heavy_under_tsan = heavy_under_tsan_because("encodes a schema")


class ServedTest(unittest.TestCase):
    """Tests sharing one server (`server`, started with `server_args`) and an
    openai client of it (`client`); the module sets `binary` and `model`
    from its command line. The server must exit cleanly."""
    binary = model = None
    server_args = ("--max-batch", "8")

    @classmethod
    def setUpClass(cls):
        cls.server = Server(ServedTest.binary, ServedTest.model, *cls.server_args)
        cls.client = openai.OpenAI(base_url=cls.server.url + "/v1", api_key="unused", max_retries=0)

    @classmethod
    def tearDownClass(cls):
        status = cls.server.stop()
        assert status == 0, f"server exit status {status}"
