"""Integration tests of `chunkserve serve` through the official `openai` client
(and raw HTTP where a client would not send such a request).

Run by CTest: python3 test_api.py BINARY MODEL
"""
import json
import os
import re
import signal
import sys
import tempfile
import threading
import time
import unittest

import openai

from harness import ServedTest, Server, Stream, connect, heavy_under_tsan, heavy_under_tsan_because, raw, wait_until

BINARY = MODEL = None
MODEL_ID = "SmolLM2-135M-Instruct.Q4_1"
SYSTEM = ("You are a careful assistant for a bookstore. Answer in one short sentence. The store opens at nine, "
          "closes at six, sells new and used books, orders any title within three days, and offers a ten percent "
          "discount to students and teachers. Gift cards never expire. Returns are accepted within thirty days.")


def read_text(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def metrics(url):
    _, _, text = raw(url, "GET", "/metrics")
    out = {}
    for line in text.splitlines():
        m = re.match(r'^(chunkserve:[a-z_]+)(\{[^}]*\})? ([0-9.e+-]+)$', line)
        if m:
            labels = m.group(2) or ""
            key = m.group(1) + (re.sub(r'model="[^"]*",?', "", labels).replace("{}", ""))
            out[key] = float(m.group(3))
    return out


def settled_metrics(url, timeout=30):
    """The metrics once nothing runs or waits (an earlier test's cancelled
    stream may still take a step), so that counters move only for what follows."""
    deadline = time.time() + timeout
    while True:
        m = metrics(url)
        if (m["chunkserve:num_requests_running"] == 0 and m["chunkserve:num_requests_waiting"] == 0) \
                or time.time() > deadline:
            return m
        time.sleep(0.05)


class Api(ServedTest):

    def error(self, status, body, path="/v1/chat/completions", headers=None):
        code, hdrs, j = raw(self.server.url, "POST", path, body, headers)
        self.assertEqual(code, status, j)
        self.assertIsInstance(j, dict, j)
        self.assertEqual(set(j["error"]), {"message", "type", "param", "code"})
        return j["error"], hdrs

    def test_models_and_health(self):
        self.assertEqual([m.id for m in self.client.models.list()], [MODEL_ID])
        self.assertEqual(raw(self.server.url, "GET", "/health")[2], {"status": "ok"})

    def test_completion_greedy(self):
        r = self.client.completions.create(model=MODEL_ID, prompt="1, 2, 3, 4,", max_tokens=6, temperature=0)
        self.assertTrue(r.choices[0].text.startswith(" 5, 6,"), r.choices[0].text)
        self.assertEqual(r.choices[0].finish_reason, "length")
        self.assertEqual(r.usage.completion_tokens, 6)
        self.assertEqual(r.usage.total_tokens, r.usage.prompt_tokens + 6)
        self.assertEqual(r.object, "text_completion")

    def test_chat(self):
        ask = lambda: self.client.chat.completions.create(
            model=MODEL_ID, messages=[{"role": "user", "content": "What is the capital of France?"}],
            max_tokens=30, temperature=0)
        r = ask()
        c = r.choices[0]
        self.assertEqual(c.message.role, "assistant")
        self.assertGreater(len(c.message.content), 10)
        self.assertIn(c.finish_reason, ("stop", "length"))
        self.assertEqual(r.object, "chat.completion")
        self.assertEqual(ask().choices[0].message.content, c.message.content)  # greedy is deterministic

    def test_chat_with_a_tool_call_in_the_history(self):
        # The assistant's tool call and the tool's result reach the template
        # (arguments as OpenAI sends them, JSON text); the reply is greedy.
        msgs = [{"role": "user", "content": "What's the weather in Paris?"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "call12345", "type": "function",
                     "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
                {"role": "tool", "tool_call_id": "call12345", "content": "18 C, cloudy"},
                {"role": "developer", "content": "Answer in one sentence."}]
        ask = lambda: self.client.chat.completions.create(model=MODEL_ID, messages=msgs, max_tokens=12,
                                                          temperature=0)
        r = ask()
        self.assertGreater(r.usage.prompt_tokens, 40)
        self.assertEqual(ask().choices[0].message.content, r.choices[0].message.content)
        # SmolLM2's template takes no tools: the generic format writes the
        # call as text (docs/tool_calls.md), so a null content (OpenAI's
        # usual) is the same turn as an empty one.
        msgs[1]["content"] = None
        self.assertEqual(ask().choices[0].message.content, r.choices[0].message.content)

    def test_stream_equals_non_stream_with_usage(self):
        kw = dict(model=MODEL_ID, messages=[{"role": "system", "content": SYSTEM},
                                            {"role": "user", "content": "Do gift cards expire?"}],
                  max_tokens=24, temperature=0.8, seed=1234)
        full = self.client.chat.completions.create(**kw)
        text, usage, finish, roles = "", None, None, 0
        for ch in self.client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw):
            if ch.usage:
                usage = ch.usage
            for c in ch.choices:
                text += c.delta.content or ""
                roles += c.delta.role == "assistant"
                finish = c.finish_reason or finish
        self.assertEqual(text, full.choices[0].message.content)
        self.assertEqual(finish, full.choices[0].finish_reason)
        self.assertEqual(roles, 1)
        self.assertEqual(usage.completion_tokens, full.usage.completion_tokens)
        self.assertEqual(usage.prompt_tokens, full.usage.prompt_tokens)

    def test_n_completions(self):
        r = self.client.completions.create(model=MODEL_ID, prompt="Once upon a time", max_tokens=12, n=2,
                                           temperature=1.0, seed=7)
        self.assertEqual(sorted(c.index for c in r.choices), [0, 1])
        self.assertNotEqual(r.choices[0].text, r.choices[1].text)
        self.assertEqual(r.usage.completion_tokens, 24)
        texts = {0: "", 1: ""}
        for ch in self.client.completions.create(model=MODEL_ID, prompt="Once upon a time", max_tokens=12, n=2,
                                                 temperature=1.0, seed=7, stream=True):
            for c in ch.choices:
                texts[c.index] += c.text
        self.assertEqual(texts, {0: r.choices[0].text, 1: r.choices[1].text})

    def test_stop_strings(self):
        r = self.client.completions.create(model=MODEL_ID, prompt="1, 2, 3, 4, 5,", max_tokens=32, temperature=0,
                                           stop=[" 8", "zzz"])
        self.assertEqual(r.choices[0].text, " 6, 7,")
        self.assertEqual(r.choices[0].finish_reason, "stop")
        streamed = "".join(ch.choices[0].text for ch in self.client.completions.create(
            model=MODEL_ID, prompt="1, 2, 3, 4, 5,", max_tokens=32, temperature=0, stop=" 8", stream=True)
            if ch.choices)
        self.assertEqual(streamed, " 6, 7,")

    def test_logprobs(self):
        r = self.client.completions.create(model=MODEL_ID, prompt="1, 2, 3,", max_tokens=4, temperature=0, logprobs=2)
        lp = r.choices[0].logprobs
        self.assertEqual(len(lp.tokens), 4)
        self.assertEqual("".join(lp.tokens), r.choices[0].text)
        for tok, l, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
            self.assertLessEqual(l, 0.0)
            self.assertEqual(len(top), 2)
            self.assertAlmostEqual(max(top.values()), l, places=4)  # greedy: the chosen token is the best
        c = self.client.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": "Hi"}],
                                                max_tokens=5, temperature=0, logprobs=True, top_logprobs=3)
        content = c.choices[0].logprobs.content
        self.assertEqual(len(content), c.usage.completion_tokens - (c.choices[0].finish_reason == "stop"))
        self.assertEqual(len(content[0].top_logprobs), 3)
        self.assertEqual(bytes(sum((e.bytes for e in content), [])).decode(), c.choices[0].message.content)

    def test_cached_tokens_on_repeated_system_prompt(self):
        def ask(q):
            return self.client.chat.completions.create(
                model=MODEL_ID, messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}],
                max_tokens=4, temperature=0)
        ask("When do you open?")
        r = ask("Can teachers get a discount?")
        cached = r.usage.prompt_tokens_details.cached_tokens
        self.assertGreater(cached, 40)
        self.assertLess(cached, r.usage.prompt_tokens)

    def test_metrics_follow_requests(self):
        before = settled_metrics(self.server.url)
        r = self.client.completions.create(model=MODEL_ID, prompt="The weather today is", max_tokens=7,
                                           temperature=0)
        after = settled_metrics(self.server.url)  # the engine publishes its counters after the step
        self.assertEqual(after["chunkserve:prompt_tokens_total"] - before["chunkserve:prompt_tokens_total"],
                         r.usage.prompt_tokens)
        self.assertEqual(after["chunkserve:generation_tokens_total"] - before["chunkserve:generation_tokens_total"],
                         r.usage.completion_tokens)
        self.assertEqual(after["chunkserve:requests_total"] - before["chunkserve:requests_total"], 1)
        self.assertEqual(after["chunkserve:time_to_first_token_seconds_count"]
                         - before["chunkserve:time_to_first_token_seconds_count"], 1)
        self.assertEqual(after["chunkserve:num_requests_running"], 0)
        self.assertGreaterEqual(after["chunkserve:kv_cache_usage_perc"], 0)
        self.assertLessEqual(after["chunkserve:kv_cache_usage_perc"], 1)
        self.assertIn('chunkserve:kv_chunks{state="cached"}', after)

    # Its counters reach /metrics and the tree view in the engine's stats
    # snapshot, which test_metrics_follow_requests reads under the sanitizer.
    @heavy_under_tsan_because("decodes three 80-token answers with drafts")
    def test_speculation_keeps_the_tokens_and_reports_predictions(self):
        code = "\n".join(f"def f{i}(x):\n    return x * {i} + {i}" for i in range(12))
        ask = lambda **kw: self.client.chat.completions.create(
            model=MODEL_ID, max_tokens=80, temperature=0,
            messages=[{"role": "user", "content": "Repeat this code exactly:\n" + code}], **kw)
        before = settled_metrics(self.server.url)
        off = ask(extra_body={"speculate": "off"})
        on = ask()
        pred = ask(prediction={"type": "content", "content": code})
        after = settled_metrics(self.server.url)
        self.assertEqual(on.choices[0].message.content, off.choices[0].message.content)
        self.assertEqual(pred.choices[0].message.content, off.choices[0].message.content)
        d_off, d_on, d_pred = (r.usage.completion_tokens_details for r in (off, on, pred))
        self.assertEqual(d_off.model_extra["drafted_tokens"], 0)
        self.assertGreater(d_on.model_extra["accepted_draft_tokens"], 20)  # it repeats its prompt: drafts from it
        self.assertEqual(d_on.accepted_prediction_tokens, 0)
        self.assertGreater(d_pred.accepted_prediction_tokens, 20)
        n_pred = len(raw(self.server.url, "POST", "/tokenize", json.dumps({"content": code}))[2]["tokens"])
        self.assertEqual(d_pred.accepted_prediction_tokens + d_pred.rejected_prediction_tokens, n_pred)
        drafted = sum(after[f'chunkserve:spec_draft_tokens_total{{source="{s}"}}']
                      - before[f'chunkserve:spec_draft_tokens_total{{source="{s}"}}'] for s in ("prediction", "tree", "context"))
        accepted = sum(after[f'chunkserve:spec_accepted_tokens_total{{source="{s}"}}']
                       - before[f'chunkserve:spec_accepted_tokens_total{{source="{s}"}}'] for s in ("prediction", "tree", "context"))
        self.assertEqual(drafted, sum(d.model_extra["drafted_tokens"] for d in (d_off, d_on, d_pred)))
        self.assertEqual(accepted, sum(d.model_extra["accepted_draft_tokens"] for d in (d_off, d_on, d_pred)))
        # The KV tree's stats (the console's card) agree with the metrics.
        spec = raw(self.server.url, "GET", "/v1/kv/tree?max_nodes=1&text=0")[2]["speculation"]
        for src in ("prediction", "tree", "context"):
            self.assertEqual(spec["sources"][src]["drafted"], after[f'chunkserve:spec_draft_tokens_total{{source="{src}"}}'])
            self.assertEqual(spec["sources"][src]["accepted"],
                             after[f'chunkserve:spec_accepted_tokens_total{{source="{src}"}}'])
        self.assertEqual(spec["drafted"], sum(v["drafted"] for v in spec["sources"].values()))
        self.error(400, json.dumps({"model": MODEL_ID, "messages": [{"role": "user", "content": "x"}],
                                    "prediction": {"type": "content", "content": 3}}))

    def test_tokenize_detokenize(self):
        _, _, t = raw(self.server.url, "POST", "/tokenize", json.dumps({"content": "Hello world"}))
        self.assertTrue(all(isinstance(x, int) for x in t["tokens"]))
        _, _, d = raw(self.server.url, "POST", "/detokenize", json.dumps({"tokens": t["tokens"]}))
        self.assertEqual(d["content"], "Hello world")
        err, _ = self.error(400, json.dumps({"tokens": [10 ** 9]}), path="/detokenize")
        self.assertIn("not in the vocabulary", err["message"])

    def test_invalid_requests(self):
        chat = lambda **kw: json.dumps({"model": MODEL_ID, "messages": [{"role": "user", "content": "hi"}], **kw})
        cases = [
            ("{not json", 400, "not valid JSON", None),
            ("[1, 2]", 400, "must be a JSON object", None),
            (chat(temperature="hot"), 400, "temperature must be a number", "temperature"),
            (chat(temperature=1e999), 400, "not valid JSON", None),  # Python writes Infinity
            (chat()[:-1] + ', "temperature": 1e999}', 400, "number overflow parsing '1e999'", None),
            (chat(temperature=5), 400, "temperature must be in [0, 2], got 5", "temperature"),
            (chat(top_p=0), 400, "top_p must be in (0, 1]", "top_p"),
            (chat(n=1000), 400, "n must be in [1, 8]", "n"),
            (chat(n=0), 400, "n must be in [1, 8], got 0", "n"),
            (chat(seed=2 ** 63), 400, "seed must be in", "seed"),
            (chat(max_tokens=-1), 400, "max_tokens must be in [0, 16777216], got -1", "max_tokens"),
            (chat(max_tokens=100000), 400, "do not fit", "max_tokens"),
            (chat(max_tokens=2.5), 400, "max_tokens must be an integer", "max_tokens"),
            (chat(stop=[1]), 400, "stop must be a string or a list of strings", "stop"),
            (chat(tools=[{"type": "function"}]), 400, "tools[0] must be {\"type\": \"function\", \"function\"", "tools[0]"),
            (chat(stream_options={"include_usage": True}), 400, "only allowed with stream", "stream_options"),
            (json.dumps({"model": MODEL_ID, "messages": []}), 400, "messages must not be empty", "messages"),
            (json.dumps({"model": MODEL_ID}), 400, "messages is required", "messages"),
            (json.dumps({"model": MODEL_ID, "messages": [{"role": "user"}]}), 400, "must have a string content",
             "messages[0].content"),
            (json.dumps({"model": MODEL_ID, "messages": ["hi"]}), 400, "must be an object", "messages[0]"),
            (json.dumps({"model": MODEL_ID, "messages": [{"role": "wizard", "content": "hi"}]}), 400,
             "unknown role 'wizard'", "messages[0].role"),
            (json.dumps({"model": MODEL_ID, "messages": [{"role": "user", "content": None}]}), 400,
             "must have a string content", "messages[0].content"),
            (json.dumps({"model": MODEL_ID, "messages": [
                {"role": "assistant", "content": None, "tool_calls": [{"type": "function", "function": {
                    "name": "f", "arguments": "not json"}}]}]}), 400,
             "messages[0].tool_calls[0].function.arguments must be a JSON object",
             "messages[0].tool_calls[0].function.arguments"),
            (json.dumps({"model": MODEL_ID, "messages": [{"role": "user", "content": "hi", "tool_calls": []}]}), 400,
             "tool_calls must be a list, on an assistant message", "messages[0].tool_calls"),
            (json.dumps({"messages": [{"role": "user", "content": "hi"}]}), 400, "model is required", "model"),
            (json.dumps({"model": "gpt-4", "messages": [{"role": "user", "content": "hi"}]}), 404,
             "the model 'gpt-4' does not exist", "model"),
            (json.dumps({"model": MODEL_ID, "messages": [{"role": "user", "content": "word " * 9000}]}), 400,
             "context is 8192 tokens", "messages"),
        ]
        for body, status, message, param in cases:
            with self.subTest(body=body[:60]):
                err, _ = self.error(status, body)
                self.assertIn(message, err["message"])
                self.assertEqual(err["param"], param)
        completion = lambda **kw: json.dumps({"model": MODEL_ID, **kw})
        for body, message, param in [
            (completion(), "prompt is required", "prompt"),
            (completion(prompt=""), "the prompt is empty", "prompt"),
            (completion(prompt=["a", "b"]), "only one prompt per request", "prompt"),
            (completion(prompt=[1, -5]), "token -5 is not in the vocabulary", "prompt"),
            (completion(prompt="hi", echo=True), "echo is not supported", "echo"),
            (completion(prompt="hi", logprobs=50), "logprobs must be in [0, 20]", "logprobs"),
        ]:
            with self.subTest(body=body):
                err, _ = self.error(400, body, path="/v1/completions")
                self.assertIn(message, err["message"])
                self.assertEqual(err["param"], param)
        # The server goes on serving.
        self.test_completion_greedy()

    def test_body_too_large(self):
        body = json.dumps({"model": MODEL_ID, "prompt": "x" * (9 << 20)})
        err, _ = self.error(413, body, path="/v1/completions")
        self.assertIn("larger than", err["message"])

    def test_unknown_route(self):
        code, _, j = raw(self.server.url, "GET", "/v2/everything")
        self.assertEqual(code, 404)
        self.assertIn("no route for GET /v2/everything", j["error"]["message"])

    @heavy_under_tsan
    def test_prompt_cache_schemas(self):
        here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "pml")
        schema = read_text(os.path.join(here, "schema_mbti_short.xml"))
        prompt = read_text(os.path.join(here, "prompt_mbti.xml"))
        code, _, info = raw(self.server.url, "POST", "/v1/schemas", schema, {"Content-Type": "application/xml"})
        self.assertEqual(code, 200, info)
        self.assertEqual((info["name"], info["modules"], info["scaffolds"]), ("mbti", 13, 9))
        self.assertGreater(info["tokens"], 100)
        err, _ = self.error(409, schema, path="/v1/schemas")
        self.assertIn("already registered", err["message"])
        err, _ = self.error(400, '<schema name="bad">\n<module name="a">x</schema>', path="/v1/schemas")
        self.assertIn("schema:2:", err["message"])
        self.assertEqual([d["name"] for d in raw(self.server.url, "GET", "/v1/schemas")[2]["data"]], ["mbti"])
        cached = self.client.chat.completions.create(model=MODEL_ID, messages=[], max_tokens=8, temperature=0,
                                                     extra_body={"pml": prompt})
        self.assertGreater(cached.usage.prompt_tokens_details.cached_tokens, 100)
        scratch = self.client.chat.completions.create(model=MODEL_ID, messages=[], max_tokens=8, temperature=0,
                                                      extra_body={"pml": prompt, "prompt_cache": False})
        self.assertEqual(scratch.usage.prompt_tokens, cached.usage.prompt_tokens)
        self.assertEqual(scratch.usage.prompt_tokens_details.cached_tokens, 0)
        # A completions prompt that is a PML document.
        r = self.client.completions.create(model=MODEL_ID, prompt=prompt, max_tokens=4, temperature=0)
        self.assertGreater(r.usage.prompt_tokens_details.cached_tokens, 100)
        err, _ = self.error(404, json.dumps({"model": MODEL_ID, "pml": '<prompt schema="nope"><a/></prompt>'}))
        self.assertIn("the schema 'nope' is not registered", err["message"])
        err, _ = self.error(400, json.dumps({"model": MODEL_ID, "pml": '<prompt schema="mbti"><E/><I/></prompt>'}))
        self.assertIn("members of one union", err["message"])
        # The counter reaches /metrics with the engine's stats after the step.
        self.assertTrue(wait_until(lambda: 'cache="cached"' in raw(self.server.url, "GET", "/metrics")[2], 60))
        code, _, j = raw(self.server.url, "DELETE", "/v1/schemas/mbti")
        self.assertEqual((code, j["deleted"]), (200, True))
        code, _, j = raw(self.server.url, "DELETE", "/v1/schemas/mbti")
        self.assertEqual((code, j["error"]["code"]), (404, "schema_not_found"))

    def test_kv_tree_while_streaming(self):
        # A stream that runs until this test hangs up (ignore_eos, its events
        # read as they come): one of 40 tokens could end before the tree was
        # asked for, and one left unread is paused out of the batch.
        stream = Stream(self.server.url, "/v1/chat/completions", {
            "model": MODEL_ID, "messages": [{"role": "system", "content": SYSTEM},
                                            {"role": "user", "content": "Tell a story."}],
            "max_tokens": 4000, "temperature": 0, "stream": True, "ignore_eos": True})
        try:
            self.assertEqual(stream.status, 200)
            self.assertTrue(stream.wait_events(1))
            code, _, j = raw(self.server.url, "GET", "/v1/kv/tree")
            self.assertEqual(code, 200, j)
            self.assertFalse(j["text_shown"])
            self.assertEqual({n["text"] for n in j["nodes"]}, {""})  # nobody's prompt is shown
            code, _, err = raw(self.server.url, "GET", "/v1/kv/tree?text=8")
            self.assertEqual(code, 403, err)
            self.assertIn("serve --tree-text", err["error"]["message"])
            live = [n for n in j["nodes"] if n["state"] == "live"]
            self.assertTrue(live, j)
            self.assertGreaterEqual(min(n["readers"] for n in live), 1)
            self.assertGreaterEqual(j["sharing"]["live_sequences"], 1)
            self.assertGreaterEqual(j["sharing"]["unshared_bytes"], j["sharing"]["held_bytes"])
            for n in j["nodes"]:
                self.assertTrue(n["parent"] < n["id"])  # parents first
        finally:
            stream.close()  # cancels it

    def test_disconnect_mid_stream_cancels(self):
        before = metrics(self.server.url)
        conn = connect(self.server.url, 60)
        conn.request("POST", "/v1/completions", json.dumps(
            {"model": MODEL_ID, "prompt": "1, 2, 3, 4,", "max_tokens": 4000, "stream": True,
             "temperature": 0, "ignore_eos": True}), {"Content-Type": "application/json"})  # runs until cancelled
        r = conn.getresponse()
        self.assertEqual(r.status, 200)
        r.fp.readline()  # the first event
        conn.sock.close()
        conn.close()
        deadline = time.time() + 30
        while time.time() < deadline:
            m = metrics(self.server.url)
            if m["chunkserve:requests_cancelled_total"] > before["chunkserve:requests_cancelled_total"] and \
                    m["chunkserve:num_requests_running"] == 0:
                break
            time.sleep(0.1)
        self.assertEqual(m["chunkserve:requests_cancelled_total"] - before["chunkserve:requests_cancelled_total"], 1,
                         "\n".join(self.server.log[-5:]))
        self.assertEqual(m['chunkserve:kv_chunks{state="used"}'], 0)


class SavedSchemas(unittest.TestCase):
    @heavy_under_tsan
    def test_schemas_survive_a_restart(self):
        here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "pml")
        schema = read_text(os.path.join(here, "schema_mbti_short.xml"))
        prompt = read_text(os.path.join(here, "prompt_mbti.xml"))
        with tempfile.TemporaryDirectory() as d:
            first = Server(BINARY, MODEL, "--schema-dir", d)
            try:
                code, _, info = raw(first.url, "POST", "/v1/schemas", schema, {"Content-Type": "application/xml"})
                self.assertEqual((code, info["saved"], info["restored"]), (200, True, False), info)
                body = json.dumps({"model": MODEL_ID, "pml": prompt, "max_tokens": 8, "temperature": 0})
                code, _, before = raw(first.url, "POST", "/v1/chat/completions", body)
                self.assertEqual(code, 200, before)
            finally:
                self.assertEqual(first.stop(), 0)
            self.assertTrue(os.path.exists(os.path.join(d, "mbti", "chunks.bin")))
            second = Server(BINARY, MODEL, "--schema-dir", d)
            try:
                self.assertTrue(any(re.search(r"schema 'mbti' loaded \(\d+ tokens", l) for l in second.log), second.log)
                listed = raw(second.url, "GET", "/v1/schemas")[2]["data"]
                self.assertEqual([(s["name"], s["restored"], s["tokens"]) for s in listed], [("mbti", True, info["tokens"])])
                code, _, after = raw(second.url, "POST", "/v1/chat/completions", body)
                self.assertEqual(after["choices"][0]["message"]["content"], before["choices"][0]["message"]["content"])
                self.assertEqual(after["usage"], before["usage"])
                code, _, j = raw(second.url, "DELETE", "/v1/schemas/mbti")
                self.assertEqual((code, j["deleted"]), (200, True))
                self.assertFalse(os.path.exists(os.path.join(d, "mbti")))
            finally:
                self.assertEqual(second.stop(), 0)


class Limits(unittest.TestCase):
    def test_api_key(self):
        s = Server(BINARY, MODEL, env={"CHUNKSERVE_API_KEY": "sekret"})
        try:
            body = json.dumps({"model": MODEL_ID, "prompt": "hi", "max_tokens": 1})
            code, _, j = raw(s.url, "POST", "/v1/completions", body)
            self.assertEqual(code, 401)
            self.assertEqual(j["error"]["code"], "invalid_api_key")
            code, _, _ = raw(s.url, "POST", "/v1/completions", body, {"Authorization": "Bearer wrong"})
            self.assertEqual(code, 401)
            ok = openai.OpenAI(base_url=s.url + "/v1", api_key="sekret", max_retries=0)
            self.assertEqual(len(ok.completions.create(model=MODEL_ID, prompt="hi", max_tokens=2).choices), 1)
            self.assertEqual(raw(s.url, "GET", "/health")[0], 200)  # probes need no key
            # Refused paths are counted under their route or "(other)", never
            # under the path sent: no client can add labels to /metrics.
            for path in ("/v1/made-up-1", "/v1/made-up-2", "/v1/schemas/made-up-3"):
                self.assertEqual(raw(s.url, "GET", path)[0], 401)
            text = raw(s.url, "GET", "/metrics", headers={"Authorization": "Bearer sekret"})[2]
            self.assertNotIn("made-up", text)
            self.assertIn('route="(other)",code="401"} 2', text)
            self.assertIn('route="/v1/schemas/{name}",code="401"} 1', text)
            self.assertIn('route="/v1/completions",code="401"} 2', text)
        finally:
            self.assertEqual(s.stop(), 0)

    def test_too_many_waiting_is_429(self):
        s = Server(BINARY, MODEL, "--max-batch", "1", "--max-waiting", "1")
        holder = waiter = None
        try:
            # A long stream holds the only running slot; the next request
            # waits; the one after finds the queue full. Nothing may free the
            # slot meanwhile, so the holder asks for ignore_eos (a sampled
            # end-of-text would end it), its events are read as they come (a
            # stream left unread is paused and leaves the batch), and the
            # waiter asks for far more tokens than the holder (shorter work
            # waiting takes a long one's place, scheduler.h; the waiter's
            # 8000 less 64 a second waited stays above the holder's 2000 for
            # over 90 s).
            holder = Stream(s.url, "/v1/completions", {"model": MODEL_ID, "prompt": "Count:", "max_tokens": 2000,
                                                      "stream": True, "ignore_eos": True})
            self.assertEqual(holder.status, 200)
            self.assertTrue(holder.wait_events(1))
            waiter = Stream(s.url, "/v1/completions", {"model": MODEL_ID, "prompt": "hi", "max_tokens": 8000,
                                                      "stream": True, "temperature": 0, "ignore_eos": True})
            self.assertTrue(wait_until(lambda: metrics(s.url)["chunkserve:num_requests_waiting"] == 1, 60))
            body = json.dumps({"model": MODEL_ID, "prompt": "hi", "max_tokens": 2})
            code, headers, j = raw(s.url, "POST", "/v1/completions", body)
            self.assertEqual(code, 429, j)
            self.assertEqual(headers.get("Retry-After"), "1")
            self.assertEqual(j["error"]["type"], "rate_limit_error")
            self.assertIn("too many requests are waiting", j["error"]["message"])
            self.assertEqual(waiter.events, [])  # still waiting
            holder.close()  # hangs up: the waiting request runs
            self.assertTrue(waiter.wait_events(1))
            self.assertEqual(waiter.status, 200)
        finally:
            for stream in (holder, waiter):
                if stream:
                    stream.close()
            self.assertEqual(s.stop(), 0)

    def test_json_log_lines(self):
        s = Server(BINARY, MODEL, "--log-format", "json")
        try:
            client = openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0)
            r = client.completions.create(model=MODEL_ID, prompt="1, 2, 3,", max_tokens=3, temperature=0)
            raw(s.url, "POST", "/v1/completions", "{bad")
            self.assertTrue(s.wait_for_log(r'"status":400'))
        finally:
            self.assertEqual(s.stop(), 0)
        lines = [json.loads(l) for l in s.log if l.startswith("{")]
        ok = [l for l in lines if l.get("status") == 200][0]
        self.assertEqual(ok["route"], "/v1/completions")
        self.assertEqual(ok["id"], r.id)
        self.assertEqual((ok["prompt_tokens"], ok["completion_tokens"]), (r.usage.prompt_tokens, 3))
        self.assertEqual(ok["finish"], "length")
        self.assertGreater(ok["total_ms"], 0)
        self.assertGreaterEqual(ok["total_ms"], ok["ttft_ms"])
        self.assertEqual([l["status"] for l in lines if l["status"] != 200], [400])

    def test_sigterm_finishes_in_flight_streams(self):
        s = Server(BINARY, MODEL, "--grace", "60")
        client = openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0)
        stream = client.completions.create(model=MODEL_ID, prompt="1, 2, 3,", max_tokens=60, temperature=0,
                                           stream=True)
        first = next(iter(stream))
        s.proc.send_signal(signal.SIGTERM)
        text = first.choices[0].text + "".join(ch.choices[0].text for ch in stream if ch.choices)
        self.assertEqual(s.stop(), 0)
        self.assertTrue(text.startswith(" 4, 5, 6"), text)
        self.assertTrue(s.wait_for_log("SIGTERM: finishing in-flight"))
        self.assertTrue(s.wait_for_log("chunkserve: stopped"))


if __name__ == "__main__":
    BINARY, MODEL = sys.argv[1], sys.argv[2]
    ServedTest.binary, ServedTest.model = BINARY, MODEL
    unittest.main(argv=[sys.argv[0], "-v"] + sys.argv[3:])
