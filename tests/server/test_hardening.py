"""The server under hostile or careless clients (issue: harden the server):
files a request must not read, connections that are slow, many, idle or
broken, bodies and headers over their limits, client mistakes that must be
4xx (never 500 or an empty 200), requests a client abandoned. Every loop is
bounded and every server listens on loopback.

Run by CTest: python3 test_hardening.py BINARY MODEL
"""
import json
import os
import re
import socket
import stat
import statistics
import sys
import tempfile
import threading
import time
import unittest

import openai

from harness import Server, connect, heavy_under_tsan, heavy_under_tsan_because, host_port, metric, raw, wait_until

BINARY = MODEL = None
MODEL_ID = "SmolLM2-135M-Instruct.Q4_1"


def read_to_close(s):
    """Everything the server sends on socket `s` until it closes; closes `s`."""
    out = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            out += b
    except ConnectionResetError:
        pass
    s.close()
    return out


def exchange(url, request, timeout=30):
    """Sends raw bytes, returns everything the server sends until it closes."""
    s = socket.create_connection(host_port(url), timeout=timeout)
    s.sendall(request)
    return read_to_close(s)


def status_of(response):
    return int(response.split(b" ", 2)[1]) if response.startswith(b"HTTP/") else None


def chat_body(content, **extra):
    return json.dumps({"model": MODEL_ID, "messages": [{"role": "user", "content": content}], "max_tokens": 4,
                       "temperature": 0, **extra})


class Server1(unittest.TestCase):
    """One server for the tests that do not need options of their own."""

    @classmethod
    def setUpClass(cls):
        cls.server = Server(BINARY, MODEL, "--max-batch", "4")

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0

    # --- files --------------------------------------------------------------

    def test_schema_src_reads_no_file(self):
        for src in ["/etc/passwd", "/dev/zero", "notes.txt", "../x"]:
            code, _, j = raw(self.server.url, "POST", "/v1/schemas",
                             f'<schema name="f"><module name="m" src="{src}"/></schema>',
                             {"Content-Type": "application/xml"})
            self.assertEqual(code, 400, j)
            self.assertIn("this schema may not read files", j["error"]["message"])
            self.assertIn("--pml-src-dir", j["error"]["message"])
        self.assertEqual(raw(self.server.url, "GET", "/v1/schemas")[2]["data"], [])

    # --- client mistakes are 400s naming the field --------------------------

    def test_client_mistakes_are_400_naming_the_field(self):
        before = metric(self.server.url, "chunkserve:http_responses_total")
        cases = [
            ("/v1/chat/completions", chat_body("hi", response_format={"type": 5}), "response_format"),
            ("/v1/chat/completions", chat_body("hi", response_format=None) .replace('"response_format": null',
                                                                                   '"response_format": []'),
             "response_format"),
            ("/v1/chat/completions", json.dumps({"model": MODEL_ID, "messages": [
                {"role": "user", "content": [{"type": 5, "text": "hi"}]}]}), "messages[0].content"),
            ("/tokenize", json.dumps({"content": "hi", "add_special": "yes"}), "add_special"),
            ("/tokenize", json.dumps({"content": "hi", "with_pieces": 1}), "with_pieces"),
        ]
        for path, body, field in cases:
            code, _, j = raw(self.server.url, "POST", path, body)
            self.assertEqual(code, 400, (body, j))
            self.assertEqual(j["error"]["param"], field, j)
        # Every response, errors included, is counted (the metrics request itself counts after it is answered).
        self.assertGreaterEqual(metric(self.server.url, "chunkserve:http_responses_total") - before, len(cases))
        self.assertTrue(self.server.wait_for_log(r"request - /tokenize 400"))

    def test_deep_nesting_is_a_400_naming_the_limit(self):
        # A schema 20,000 levels deep (500 KB) crashed the server (a recursive walk overflowed the stack),
        # whichever field carried it. Now every such body is refused before it is walked, and the server lives.
        # (Bodies are built as text: Python's json recurses too.)
        def deep(levels):
            return '{"type":"array","items":' * levels + '{"type":"string"}' + "}" * levels

        def chat(extra):  # a chat body with `extra` (JSON text of members) added
            return chat_body("hi")[:-1] + ", " + extra + "}"

        schema = deep(20000)
        cases = [
            ("/v1/chat/completions", chat('"response_format": {"type": "json_schema", "json_schema": '
                                          '{"name": "x", "schema": ' + schema + '}}'), "too_deeply_nested"),
            ("/v1/completions", json.dumps({"model": MODEL_ID, "prompt": "hi", "max_tokens": 4})[:-1] +
             ', "guided_json": ' + schema + "}", "too_deeply_nested"),
            ("/v1/chat/completions", chat('"tool_choice": "auto", "tools": [{"type": "function", "function": '
                                          '{"name": "f", "parameters": ' + schema + '}}]'), "too_deeply_nested"),
            ("/tokenize", '{"content": "hi", "x": ' + schema + "}", "too_deeply_nested"),
            # Inside a string (a schema as JSON text, a call's arguments): the string is measured too.
            ("/v1/chat/completions", chat_body("hi", response_format={
                "type": "json_schema", "json_schema": {"name": "x", "schema": schema}}), "too_deeply_nested"),
            ("/v1/chat/completions", json.dumps({"model": MODEL_ID, "max_tokens": 4, "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "type": "function", "function": {
                    "name": "f", "arguments": "[" * 5000 + "]" * 5000}}]},
                {"role": "tool", "tool_call_id": "c", "content": "ok"}]}), "too_deeply_nested"),
            # Within the body's limit, over the schema's: 40 levels of subschemas; a regex of 40 nested groups.
            ("/v1/chat/completions", chat('"response_format": {"type": "json_schema", "json_schema": '
                                          '{"name": "x", "schema": ' + deep(40) + '}}'), "invalid_schema"),
            ("/v1/chat/completions", chat_body("hi", regex="(" * 40 + "a" + ")" * 40), "invalid_regex"),
        ]
        for path, body, code_name in cases:
            code, _, j = raw(self.server.url, "POST", path, body)
            self.assertEqual(code, 400, (path, code_name, str(j)[:300]))
            self.assertEqual(j["error"]["code"], code_name, j)
            self.assertIn("at most", j["error"]["message"])
            if code_name == "too_deeply_nested":
                self.assertRegex(j["error"]["message"], r"nests [0-9]+ levels deep; at most 128 are accepted")
        _, _, j = raw(self.server.url, "POST", "/v1/chat/completions", cases[-2][1])
        self.assertIn("nests subschemas more than 32 levels deep", j["error"]["message"])
        code, _, j = raw(self.server.url, "POST", "/v1/chat/completions", chat_body("Say hi."))
        self.assertEqual(code, 200, j)

    @heavy_under_tsan_because("ten requests of 480 tokens with logprobs; ThreadSanitizer's allocator is not glibc's")
    def test_memory_levels_off_over_logprobs_requests(self):
        # n completions with top-20 logprobs each: RSS grew by the answer's size with every request and
        # never came back (glibc kept it in the workers' arenas). Now it levels off.
        def rss_mb():
            with open(f"/proc/{self.server.proc.pid}/status") as f:
                return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1)) / 1024

        body = json.dumps({"model": MODEL_ID, "prompt": "Once upon a time", "n": 4, "max_tokens": 120, "logprobs": 20,
                           "temperature": 1.0})
        seen = []
        for _ in range(10):
            code, _, j = raw(self.server.url, "POST", "/v1/completions", body)
            self.assertEqual(code, 200, str(j)[:200])
            self.assertEqual(len(j["choices"][0]["logprobs"]["top_logprobs"][0]), 20)
            seen.append(rss_mb())
        # Before: about 2.7 MB more after each of these requests, never given back (the lowest of the
        # last five was ~8 MB above the first five's median). Now RSS moves within a band: glibc's arenas
        # swing by up to ~10 MB over a few requests and come back, so the
        # test asks that the last five come back down to where the first five were, give or take.
        self.assertLess(min(seen[5:]) - statistics.median(seen[:5]), 5, seen)

    def test_compiles_have_a_budget_and_stop_with_their_client(self):
        # An enum of 1000 strings of 200 characters is within the limits but took 15 s of CPU to compile
        # on the request's thread, beside the engine, and ran on after its client left. Now it compiles in
        # a child process at the lowest priority, under --grammar-budget, and is killed with its client.
        import random
        rng = random.Random(1)
        schema = {"enum": ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(200)) for _ in range(1000)]}
        body = chat_body("hi", response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}})
        s = Server(BINARY, MODEL, "--grammar-budget", "1")
        try:
            code, headers, j = raw(s.url, "POST", "/v1/chat/completions", body)
            if code == 503:
                # A busy machine gave the niced compile less than a third of a core: its 3 s of wall
                # time ran out before its 1 s of CPU, which is the server's load, not the schema's fault.
                self.assertEqual(j["error"]["code"], "compiles_busy", j)
                self.assertIn("Retry-After", dict(headers), headers)
                self.assertRegex(j["error"]["message"], r"too busy to compile the constraint: it had [0-9.]+ s of CPU "
                                                        r"time in 3 s \(its budget: 1 s of CPU time\); retry later")
                self.assertEqual(metric(s.url, "chunkserve:constraints_total", 'outcome="busy"'), 1)
            else:
                self.assertEqual(code, 400, j)
                self.assertEqual(j["error"]["code"], "invalid_schema")
                self.assertRegex(j["error"]["message"], r"did not compile within its budget of 1 s of CPU time")
                self.assertEqual(metric(s.url, "chunkserve:constraints_total", 'outcome="over_budget"'), 1)
            code, _, j = raw(s.url, "POST", "/v1/chat/completions", chat_body("Say hi."))
            self.assertEqual(code, 200, j)
        finally:
            self.assertEqual(s.stop(), 0)
        # Under tool_choice auto the grammar of the calls the model may begin is the server's own idea:
        # one that does not compile within a second (its CPU budget where less, 0.1 s here) is dropped and
        # the request served as before it existed (its calls parsed from free text), unless a tool is
        # strict, where the client asked for it. The tool's counted pattern takes seconds of CPU time, so that no
        # machine's speed decides which way the compile goes (a plain tool took about 0.1 s, either side).
        s = Server(BINARY, MODEL, "--grammar-budget", "0.1")
        try:
            tool = {"type": "function", "function": {"name": "pick", "parameters": {
                "type": "object", "properties": {"city": {"type": "string", "pattern": "^([a-z]{1,40}-){1,40}$"}},
                "required": ["city"]}}}
            code, _, j = raw(s.url, "POST", "/v1/chat/completions", chat_body("hi", tools=[tool]))
            self.assertEqual(code, 200, j)
            # Waited for its CPU budget (0.1 s; a second at most), then served
            # without it while the compile goes on (here, to its budget).
            self.assertEqual(metric(s.url, "chunkserve:constraints_total", 'outcome="pending"'), 1)
            self.assertEqual(metric(s.url, "chunkserve:constraints_total", 'outcome="dropped"'), 1)
            tool["function"]["strict"] = True
            code, _, j = raw(s.url, "POST", "/v1/chat/completions", chat_body("hi", tools=[tool]))
            self.assertIn(code, (400, 503), j)
            self.assertEqual(j["error"]["param"], "tools", j)
            self.assertEqual(metric(s.url, "chunkserve:constraints_total", 'outcome="dropped"'), 1)
        finally:
            self.assertEqual(s.stop(), 0)
        # A client that leaves while its schema compiles (the default budget, 10 s of CPU; this compile
        # takes more): the compile is killed because its client left, not when its budget ran out (the
        # server counts which), and no child process lingers. No wall-clock bound: under a sanitizer on a
        # busy machine the kill can come seconds later; the waits below are only bounded.
        s = Server(BINARY, MODEL)
        try:
            def children():
                out = []
                for tid in os.listdir(f"/proc/{s.proc.pid}/task"):
                    try:
                        with open(f"/proc/{s.proc.pid}/task/{tid}/children") as f:
                            out += f.read().split()
                    except OSError:
                        pass
                return out

            sock = socket.create_connection(host_port(s.url), timeout=10)
            payload = body.encode()
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: " + str(len(payload)).encode() + b"\r\n\r\n" + payload)
            deadline = time.time() + 60
            while not children() and time.time() < deadline:
                time.sleep(0.02)
            self.assertTrue(children(), "no compile started")
            sock.close()
            deadline = time.time() + 120
            while (children() or not metric(s.url, "chunkserve:constraints_total")) and time.time() < deadline:
                time.sleep(0.05)
            self.assertEqual(children(), [])
            self.assertEqual(metric(s.url, "chunkserve:constraints_total", 'outcome="cancelled"'), 1)
            self.assertEqual(metric(s.url, "chunkserve:constraints_total"), 1)
            code, _, j = raw(s.url, "POST", "/v1/chat/completions", chat_body("Say hi."))
            self.assertEqual(code, 200, j)
        finally:
            self.assertEqual(s.stop(), 0)

    def assertChatTakesFewSteps(self, s):
        steps = metric(s.url, "chunkserve:engine_steps_total")
        started = time.time()
        code, _, j = raw(s.url, "POST", "/v1/chat/completions", chat_body("Say hi."))
        self.assertEqual(code, 200, j)
        steps = metric(s.url, "chunkserve:engine_steps_total") - steps
        print(f"\nchat answered in {steps:.0f} engine steps ({time.time() - started:.2f} s)", file=sys.stderr)
        self.assertLessEqual(steps, 64 + 16)  # the quantum, the chat's prefill and tokens, a little slack

    @heavy_under_tsan_because("64 streams of 2000 tokens")
    def test_streams_that_never_read_do_not_hold_every_slot(self):
        # 64 streams whose clients never read kept 32 slots generating while a 4-token chat timed out at 8 s;
        # one request with n = 32 took every slot (a small chat waited 22.8 s). Now unread streams are
        # paused, shorter work takes the place of longer, and a request holds half the batch while others wait.
        # Counted in engine steps, not seconds (a 5 s bound failed a CI run by load alone, 5.6 s): the chat
        # waits at most until a running sequence has sampled its quantum (64 tokens, scheduler.h), then
        # needs its prefill and 4 tokens; waiting behind the streams or the n = 32 request would take
        # hundreds of steps (2000 and 400 tokens each).
        s = Server(BINARY, MODEL)
        socks = []
        try:
            body = json.dumps({"model": MODEL_ID, "prompt": "Tell me a long story.", "max_tokens": 2000,
                               "stream": True, "ignore_eos": True}).encode()
            for _ in range(64):
                sock = socket.create_connection(host_port(s.url), timeout=30)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                             b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
                socks.append(sock)
            time.sleep(3)  # the streams run and fill their buffers
            self.assertChatTakesFewSteps(s)
            # One request of n = 32 beside a small chat.
            big = json.dumps({"model": MODEL_ID, "prompt": "Count to ten.", "n": 32, "max_tokens": 400,
                              "ignore_eos": True, "temperature": 1.0})
            t = threading.Thread(target=raw, args=(s.url, "POST", "/v1/completions", big))
            t.start()
            time.sleep(2)
            self.assertChatTakesFewSteps(s)
            for sock in socks:
                sock.close()
            socks = []
            t.join(120)
            self.assertGreater(metric(s.url, "chunkserve:fairness_yields_total"), 0)
        finally:
            for sock in socks:
                sock.close()
            self.assertEqual(s.stop(), 0)
        # Streams that never read, long enough to fill their send buffers (64 KiB): paused, out of the batch,
        # and logged as such when they end.
        s = Server(BINARY, MODEL, "--max-batch", "2")
        try:
            body = json.dumps({"model": MODEL_ID, "prompt": "Tell me a long story.", "max_tokens": 4000,
                               "stream": True, "ignore_eos": True}).encode()
            for _ in range(2):
                sock = socket.create_connection(host_port(s.url), timeout=30)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                             b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
                socks.append(sock)
            deadline = time.time() + 120
            while metric(s.url, "chunkserve:paused_sequences_total") < 2 and time.time() < deadline:
                time.sleep(0.5)
            self.assertGreaterEqual(metric(s.url, "chunkserve:paused_sequences_total"), 2)
            self.assertEqual(metric(s.url, "chunkserve:num_requests_running"), 0)
            code, _, j = raw(s.url, "POST", "/v1/chat/completions", chat_body("Say hi."))
            self.assertEqual(code, 200, j)
            for sock in socks:
                sock.close()
            socks = []
            self.assertTrue(s.wait_for_log(r"paused=1 \(its client left 256 events unread\)", 60))
        finally:
            for sock in socks:
                sock.close()
            self.assertEqual(s.stop(), 0)

    def test_json_whatever_the_content_type(self):
        # curl -d sends application/x-www-form-urlencoded; a 20 KB JSON body must still be read as JSON
        # (padded with JSON's own whitespace: a short prompt, a long body).
        body = chat_body("Say hi.") + " " * 20000
        code, _, j = raw(self.server.url, "POST", "/v1/chat/completions", body,
                         {"Content-Type": "application/x-www-form-urlencoded"})
        self.assertEqual(code, 200, j)
        self.assertGreater(j["usage"]["completion_tokens"], 0)

    # --- limits ---------------------------------------------------------------

    def test_chunked_body_over_the_limit_is_413(self):
        host, port = host_port(self.server.url)
        s = socket.create_connection((host, port), timeout=30)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Transfer-Encoding: chunked\r\n\r\n")
        piece = b"x" * (1 << 20)
        try:
            for _ in range(64):  # up to 64 MiB; the server must stop it after 8
                s.sendall(b"%x\r\n" % len(piece) + piece + b"\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        got = read_to_close(s)
        self.assertEqual(status_of(got), 413, got[:200])
        self.assertIn(b"larger than 8388608 bytes", got)

    def test_header_and_length_errors(self):
        big = exchange(self.server.url, b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100_000 + b"\r\n\r\n")
        self.assertEqual(status_of(big), 431, big[:200])
        neg = exchange(self.server.url, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n")
        self.assertEqual(status_of(neg), 400, neg[:200])
        self.assertIn(b'"error"', neg)

    def test_http10_stream_is_not_chunked(self):
        body = json.dumps({"model": MODEL_ID, "prompt": "1, 2, 3,", "max_tokens": 4, "stream": True,
                           "temperature": 0}).encode()
        out = exchange(self.server.url, b"POST /v1/completions HTTP/1.0\r\nContent-Type: application/json\r\n"
                       b"Content-Length: %d\r\n\r\n" % len(body) + body)
        head, _, rest = out.partition(b"\r\n\r\n")
        self.assertTrue(head.startswith(b"HTTP/1.0 200"), head)
        self.assertNotIn(b"chunked", head.lower())
        # A slow first token (a sanitizer build) may come after SSE comments
        # (": keep-alive"); every other event is a plain data line.
        self.assertTrue(rest.endswith(b"\n\n"), rest[-80:])
        events = rest[:-2].split(b"\n\n")
        data = [e for e in events if e != b": keep-alive"]
        self.assertTrue(data and all(e.startswith(b"data: ") for e in data), rest[:200])
        self.assertTrue(data[0].startswith(b"data: {"), data[0][:80])
        self.assertEqual(data[-1], b"data: [DONE]")
        self.assertEqual(events.index(data[-1]), len(events) - 1)

    def test_whole_streams_are_logged_200(self):
        client = openai.OpenAI(base_url=self.server.url + "/v1", api_key="unused", max_retries=0)
        labels = ('route="/v1/chat/completions"', 'code="499"')
        before = metric(self.server.url, "chunkserve:http_responses_total", *labels)
        ok = metric(self.server.url, "chunkserve:http_responses_total", 'route="/v1/chat/completions"', 'code="200"')
        for _ in range(8):
            text = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
                model=MODEL_ID, messages=[{"role": "user", "content": "Count to three."}], max_tokens=8,
                temperature=0, stream=True))
            self.assertTrue(text)
        # A stream is logged once its last byte is written, and OpenAI's client stops reading at [DONE],
        # before the chunked body's end: the last stream's line may come a moment after the loop (a CI run
        # read 7 of 8). Wait for the eighth, then no 499 may have been counted beside them.
        served = lambda: metric(self.server.url, "chunkserve:http_responses_total", 'route="/v1/chat/completions"',
                                'code="200"') - ok
        wait_until(lambda: served() >= 8, timeout=30)
        self.assertEqual(served(), 8)
        self.assertEqual(metric(self.server.url, "chunkserve:http_responses_total", *labels) - before, 0)

    # --- connections -----------------------------------------------------------

    def test_idle_connection_still_answers(self):
        conn = connect(self.server.url, 30)
        conn.connect()
        time.sleep(3)  # longer than the old 2 s idle close
        conn.request("GET", "/health")
        self.assertEqual(conn.getresponse().status, 200)
        conn.close()

    def test_many_requests_on_one_connection(self):
        conn = connect(self.server.url, 30)
        for _ in range(20):  # beyond the old keep-alive maximum of 5
            conn.request("GET", "/health")
            r = conn.getresponse()
            r.read()
            self.assertEqual(r.status, 200)
            self.assertNotEqual(r.getheader("Connection"), "close")
        conn.close()

    def test_hundred_simultaneous_connects_all_answered(self):
        n = 100
        start = threading.Barrier(n)
        results = [None] * n

        def one(i):
            start.wait()
            try:
                results[i] = status_of(exchange(self.server.url, b"GET /health HTTP/1.1\r\nHost: x\r\n"
                                                 b"Connection: close\r\n\r\n"))
            except OSError as e:
                results[i] = repr(e)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        self.assertEqual(results, [200] * n)

    def test_slow_headers_do_not_starve_others(self):
        # 200 clients send their headers one byte every 100 ms (slowloris);
        # an ordinary chat is answered while all of them are still connected.
        n = 200
        stop = threading.Event()
        socks = []
        for _ in range(n):
            s = socket.create_connection(host_port(self.server.url), timeout=30)
            s.sendall(b"G")
            socks.append(s)

        def drip():
            for _ in range(600):  # at most 60 s
                if stop.wait(0.1):
                    return
                for s in socks:
                    try:
                        s.sendall(b"E")
                    except OSError:
                        pass

        t = threading.Thread(target=drip)
        t.start()
        try:
            began = time.time()
            code, _, j = raw(self.server.url, "POST", "/v1/chat/completions", chat_body("Hi"))
            took = time.time() - began
            self.assertEqual(code, 200, j)
            self.assertTrue(t.is_alive(), "the slow clients were done before the chat was answered")
            print(f"\nchat answered in {took:.3f} s beside {n} slow-header clients", file=sys.stderr)
        finally:
            stop.set()
            t.join()
            for s in socks:
                s.close()

    def test_slow_headers_are_cut_at_the_deadline(self):
        s = socket.create_connection(host_port(self.server.url), timeout=30)
        s.sendall(b"GET /health HTTP/1.1\r\n")
        got = b""
        for _ in range(150):  # 15 s at most; the header deadline is 10 s
            try:
                s.sendall(b"X")
            except OSError:
                break
            s.settimeout(0.1)
            try:
                b = s.recv(4096)
                if not b:
                    break
                got += b
            except socket.timeout:
                pass
            except ConnectionResetError:
                break
        s.close()
        self.assertEqual(status_of(got), 408, got[:200])
        self.assertIn(b"did not arrive within 10000 ms", got)

    def test_abandoned_answer_is_cancelled(self):
        before = metric(self.server.url, "chunkserve:requests_cancelled_total")
        s = socket.create_connection(host_port(self.server.url), timeout=30)
        body = json.dumps({"model": MODEL_ID, "prompt": "1, 2, 3, 4,", "max_tokens": 4000,
                           "temperature": 0, "ignore_eos": True}).encode()  # not streamed: runs until cancelled
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body) + body)
        time.sleep(0.5)
        s.close()
        deadline = time.time() + 30
        while time.time() < deadline:
            if metric(self.server.url, "chunkserve:requests_cancelled_total") > before and \
                    metric(self.server.url, "chunkserve:num_requests_running") == 0:
                break
            time.sleep(0.1)
        self.assertEqual(metric(self.server.url, "chunkserve:requests_cancelled_total") - before, 1)
        self.assertTrue(self.server.wait_for_log(r"/v1/completions 499 .*finish=cancelled"))


class Options(unittest.TestCase):
    def test_pml_src_dir_allows_files_below_it_only(self):
        with tempfile.TemporaryDirectory() as d:
            allowed = os.path.join(d, "allowed")
            os.mkdir(allowed)
            with open(os.path.join(allowed, "rules.txt"), "w") as f:
                f.write("Always answer in French.")
            with open(os.path.join(d, "secret.txt"), "w") as f:
                f.write("secret")
            os.symlink(os.path.join(d, "secret.txt"), os.path.join(allowed, "link.txt"))
            saved = os.path.join(d, "saved")
            s = Server(BINARY, MODEL, "--pml-src-dir", allowed, "--schema-dir", saved)
            try:
                code, _, j = raw(s.url, "POST", "/v1/schemas",
                                 '<schema name="ok"><module name="m" src="rules.txt"/></schema>')
                self.assertEqual(code, 200, j)
                for src, why in [("../secret.txt", "'..'"), ("link.txt", "symbolic links"),
                                 (os.path.join(d, "secret.txt"), "relative path")]:
                    code, _, j = raw(s.url, "POST", "/v1/schemas",
                                     f'<schema name="no"><module name="m" src="{src}"/></schema>')
                    self.assertEqual(code, 400, j)
                    self.assertIn(why, j["error"]["message"])
                # The saved copy is the owner's only.
                for name in ["manifest.json", "chunks.bin"]:
                    mode = stat.S_IMODE(os.stat(os.path.join(saved, "ok", name)).st_mode)
                    self.assertEqual(mode, 0o600, name)
            finally:
                self.assertEqual(s.stop(), 0)

    def test_interrupted_save_is_removed_at_start(self):
        with tempfile.TemporaryDirectory() as d:
            stale = os.path.join(d, ".s.saving-999999999")
            os.mkdir(stale)
            with open(os.path.join(stale, "chunks.bin"), "wb") as f:
                f.write(b"\0" * 100)
            s = Server(BINARY, MODEL, "--schema-dir", d)
            try:
                self.assertFalse(os.path.exists(stale))
                self.assertTrue(s.wait_for_log(r"removed .*\.s\.saving-999999999: an interrupted save"))
            finally:
                self.assertEqual(s.stop(), 0)

    @heavy_under_tsan
    def test_prompt_beside_pinned_schema_is_refused_with_numbers(self):
        words = " ".join(f"word{i}" for i in range(320))  # about 1175 tokens: 21 pinned chunks
        s = Server(BINARY, MODEL, "--kv-memory", "48M", "--ctx", "2048", "--max-batch", "1")
        try:
            code, _, j = raw(s.url, "POST", "/v1/schemas", f'<schema name="mid"><system>{words}</system></schema>')
            self.assertEqual(code, 200, j)
            for stream in (False, True):
                code, _, j = raw(s.url, "POST", "/v1/chat/completions", json.dumps(
                    {"model": MODEL_ID, "pml": '<prompt schema="mid"><user>Hi</user></prompt>',
                     "prompt_cache": False, "max_tokens": 4, "stream": stream}))
                self.assertEqual(code, 400, j)
                self.assertIn("of which Prompt Cache schemas pin 21, leaving 13", j["error"]["message"])
            # The cached prompt reads the pinned chunks and fits.
            code, _, j = raw(s.url, "POST", "/v1/chat/completions", json.dumps(
                {"model": MODEL_ID, "pml": '<prompt schema="mid"><user>Hi</user></prompt>', "max_tokens": 4}))
            self.assertEqual(code, 200, j)
            self.assertGreater(j["usage"]["completion_tokens"], 0)
        finally:
            self.assertEqual(s.stop(), 0)

    def test_chat_runs_while_a_schema_encodes(self):
        # About 370 tokens: 23 steps of 16 alone, 46 of 8 beside the chat (its
        # 31-token prompt and 4 tokens take 7); small, for the sanitizer's build.
        words = " ".join(f"word{i}" for i in range(100))
        s = Server(BINARY, MODEL, "--step-tokens", "16")
        try:
            done = {}

            def register():
                done["schema"] = raw(s.url, "POST", "/v1/schemas", f'<schema name="long"><system>{words}</system></schema>')
                done["schema_at"] = time.monotonic()

            t = threading.Thread(target=register)
            t.start()
            deadline = time.time() + 120
            while metric(s.url, "chunkserve:schema_encode_tokens_total") == 0 and time.time() < deadline:
                time.sleep(0.02)
            self.assertEqual(metric(s.url, "chunkserve:schemas_encoding"), 1)
            code, _, j = raw(s.url, "POST", "/v1/chat/completions", chat_body("Hi"))
            chat_at = time.monotonic()
            self.assertEqual(code, 200, j)
            self.assertGreater(j["usage"]["completion_tokens"], 0)
            t.join(600)
            self.assertEqual(done["schema"][0], 200, done["schema"][2])
            self.assertLess(chat_at, done["schema_at"], "the chat waited for the schema's encoding")
            self.assertGreaterEqual(metric(s.url, "chunkserve:schema_encode_tokens_total"), done["schema"][2]["tokens"])
            self.assertEqual(metric(s.url, "chunkserve:schemas_encoding"), 0)
        finally:
            self.assertEqual(s.stop(), 0)

    def test_api_key_from_the_environment(self):
        s = Server(BINARY, MODEL, env={"CHUNKSERVE_API_KEY": "k3y"})
        try:
            self.assertEqual(raw(s.url, "GET", "/v1/models")[0], 401)
            self.assertEqual(raw(s.url, "GET", "/v1/models", headers={"Authorization": "Bearer k3y"})[0], 200)
            self.assertEqual(raw(s.url, "GET", "/v1/models", headers={"Authorization": "Bearer k3"})[0], 401)
            # The scheme is case-insensitive (RFC 9110), spaces around the key are no part of it.
            for h in ("bearer k3y", "BEARER k3y", "Bearer   k3y", "bEaReR\tk3y "):
                self.assertEqual(raw(s.url, "GET", "/v1/models", headers={"Authorization": h})[0], 200, h)
            for h in ("Basic k3y", "Bearerk3y", "k3y", "Bearer", "Bearer k3y k3y"):
                self.assertEqual(raw(s.url, "GET", "/v1/models", headers={"Authorization": h})[0], 401, h)
            with open(f"/proc/{s.proc.pid}/cmdline", "rb") as f:
                self.assertNotIn(b"k3y", f.read())
        finally:
            self.assertEqual(s.stop(), 0)

    def test_tree_text_only_when_allowed(self):
        s = Server(BINARY, MODEL, "--tree-text")
        try:
            client = openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0)
            client.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": "Say hi."}],
                                           max_tokens=2)
            code, _, j = raw(s.url, "GET", "/v1/kv/tree?text=8")
            self.assertEqual(code, 200, j)
            self.assertTrue(j["text_shown"])
            self.assertTrue(any(n["text"] for n in j["nodes"]), j)
        finally:
            self.assertEqual(s.stop(), 0)


if __name__ == "__main__":
    BINARY, MODEL = sys.argv[1], sys.argv[2]
    unittest.main(argv=[sys.argv[0], "-v"] + sys.argv[3:])
