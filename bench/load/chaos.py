#!/usr/bin/env python3
"""Chaos soak: random traffic over every route at once, against a server whose
KV pool is small (preemption), with the disk tier, Prompt Cache schemas, stored
responses, held prefixes, speculation and constraints all on. Bounded in time
and requests; stops by itself. Meant for a sanitizer build of the server (a
report ends the run as a failure) and for minutes to hours, so it is a tool, not
a CTest test.

What it holds the server to:
- exactness under load: greedy and seeded answers, asked through chat,
  completions, the Messages and the Responses APIs, streamed or not, with
  speculation on or off, with a right or a wrong `prediction`, with `n` up to 3,
  equal the answers the same requests got alone before the load began (and
  again after it);
- no 5xx but 503/429 with Retry-After, no dropped connection, for any body:
  valid ones, mutated ones (a field given another type, a huge or negative
  number, a field dropped) and garbage; every error in its API's own shape;
- every 200 well formed (its API's object or its events, ending as the API
  ends a stream); a constrained answer that stopped parses and fits its schema;
  a demanded tool call has JSON arguments (the last one may be cut short
  where max_tokens cut the reply), and a call under allowed_tools names a
  listed tool; streamed calls rebuilt from their deltas are held to the same;
- clients that hang up mid-stream or before the answer cancel their requests:
  after the load, nothing runs, nothing waits, no KV chunk is held by a
  sequence but the held prefixes' (cache_control), and RSS has not grown
  past --rss-slack;
- the server exits 0 on SIGTERM (with prefixes still held, which are let go
  and stored to the disk tier) and its stderr has no sanitizer report.

  bench/load/chaos.py --seconds 600                          # build/chunkserve
  bench/load/chaos.py --binary build-sanitize/chunkserve --seconds 1800
  CHUNKSERVE_SERVER_ARGS="-t 1" bench/load/chaos.py --binary build-tsan/chunkserve
  bench/load/chaos.py --chat-template tests/data/templates/llama-cpp-deepseek-r1.jinja
      # every reply opens in a thought: budgets, and constraints after the thought

Prints one JSON line (counts by kind and status, failures) and exits 1 on any
failure.
"""
import argparse
import copy
import http.client
import json
import os
import random
import re
import signal
import socket
import sys
import tempfile
import threading
import time

import jsonschema

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "server"))
from harness import Server  # noqa: E402

SYSTEM = ("You are the help desk of Riverside Books, a bookshop with a cafe. Answer in one or two "
          "sentences, politely, and only about the shop. ") * 6
QUESTIONS = ["When do you open on Sundays?", "Do students get a discount?", "Can I return a gift?",
             "Is there parking nearby?", "Do you sell rare editions?", "What does the cafe serve?",
             "How do gift cards work?", "Can you order a book for me?"]
SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                      "age": {"type": "integer", "minimum": 0, "maximum": 120}},
     "required": ["name", "age"], "additionalProperties": False},
    {"type": "array", "items": {"type": "string", "enum": ["red", "green", "blue"]}, "maxItems": 4},
    {"type": "object", "properties": {"ok": {"type": "boolean"},
                                      "tags": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]{1,6}$"}}},
     "required": ["ok"]},
    {"anyOf": [{"type": "integer"}, {"type": "string", "format": "date"}]},
    {"$defs": {"p": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]}},
     "type": "object", "properties": {"a": {"$ref": "#/$defs/p"}, "b": {"$ref": "#/$defs/p"}}, "required": ["a"]},
]
REFUSED_SCHEMAS = [{"type": "array", "items": {"type": "integer"}, "uniqueItems": True},
                   {"allOf": [{"type": "object"}, {"required": ["a"]}]},
                   {"type": "integer", "not": {"const": 3}}]
TOOLS = [{"type": "function", "function": {
    "name": "lookup", "description": "Finds a book by title.",
    "parameters": {"type": "object", "properties": {"title": {"type": "string", "maxLength": 40},
                                                    "copies": {"type": "integer", "minimum": 1, "maximum": 9}},
                   "required": ["title"]}}},
    {"type": "function", "function": {"name": "hours", "description": "Opening hours of a day.",
                                      "parameters": {"type": "object", "properties": {
                                          "day": {"type": "string", "enum": ["mon", "tue", "sun"]}},
                                          "required": ["day"]}}},
         # No description, no parameters (OpenAI allows both left out;
         # several templates fail on it in jinja2).
         {"type": "function", "function": {"name": "now"}}]
TOOL_NAMES = [t["function"]["name"] for t in TOOLS]
RETRY_STATUSES = (429, 503)


class Failure(Exception):
    pass


def post(url, path, body, method="POST", timeout=600, headers=None):
    """(status, headers, body text) of one request; body is bytes, str or JSON."""
    host, port = url.replace("http://", "").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        data = body if isinstance(body, (bytes, str)) or body is None else json.dumps(body)
        conn.request(method, path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read().decode("utf-8", "replace")
    finally:
        conn.close()


def stream(url, path, body, hang_up_after=None, timeout=600):
    """(status, data lines, event names) of a streamed POST; with hang_up_after,
    the socket is shut after that many data lines (None: read to the end)."""
    host, port = url.replace("http://", "").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        if r.status != 200:
            return r.status, [r.read().decode("utf-8", "replace")], []
        data, names = [], []
        while True:
            line = r.readline()
            if not line:
                break
            line = line.decode("utf-8", "replace").rstrip("\r\n")
            if line.startswith("event: "):
                names.append(line[7:])
            elif line.startswith("data: "):
                data.append(line[6:])
                if hang_up_after is not None and len(data) >= hang_up_after:
                    conn.sock.shutdown(socket.SHUT_RDWR)
                    return 200, data, names
        return 200, data, names
    finally:
        conn.close()


def error_shape(api, status, text):
    """Raises unless text is the API's error object for a 4xx/5xx."""
    try:
        obj = json.loads(text)
    except ValueError:
        raise Failure(f"{status} body is not JSON: {text[:200]!r}")
    if api == "messages":
        ok = obj.get("type") == "error" and isinstance(obj.get("error"), dict) and obj["error"].get("message")
    else:
        ok = isinstance(obj.get("error"), dict) and obj["error"].get("message")
    if not ok:
        raise Failure(f"{status} error not in the {api} API's shape: {text[:200]!r}")


class Request:
    """One request to make: its route, body, API (for shapes), whether a 200 is
    required, and what its text must equal (greedy and seeded references)."""

    def __init__(self, kind, api, path, body, must_succeed=True, expect=None, check=None, stream=False,
                 hang_up_after=None, raw_body=None, method="POST"):
        self.kind, self.api, self.path, self.body = kind, api, path, body
        self.must_succeed, self.expect, self.check = must_succeed, expect, check
        self.stream, self.hang_up_after, self.raw_body, self.method = stream, hang_up_after, raw_body, method


# A reply's text as compared: its thought (a thinking template's; empty
# without one), SEP, its answer.
SEP = "\x00"


def answer_of(text):
    return text.split(SEP, 1)[1]


def text_of(api, obj):
    """The list of choices' texts (thought SEP answer) of a whole answer, in its API's shape."""
    if api == "chat":
        return [(c["message"].get("reasoning_content") or "") + SEP + (c["message"].get("content") or "")
                for c in obj["choices"]]
    if api == "completions":
        return [SEP + c["text"] for c in obj["choices"]]
    if api == "messages":
        if obj.get("type") != "message" or obj.get("role") != "assistant" or "usage" not in obj:
            raise Failure(f"not a message: {str(obj)[:200]}")
        return ["".join(b["thinking"] for b in obj["content"] if b["type"] == "thinking") + SEP +
                "".join(b["text"] for b in obj["content"] if b["type"] == "text")]
    if api == "responses":
        if obj.get("object") != "response" or obj.get("status") not in ("completed", "incomplete"):
            raise Failure(f"not a response: {str(obj)[:200]}")
        return ["".join(p["text"] for it in obj["output"] if it["type"] == "reasoning" for p in it["content"]) + SEP +
                "".join(p["text"] for it in obj["output"] if it["type"] == "message" for p in it["content"])]
    raise ValueError(api)


def streamed_text(api, data, names):
    """Texts of a whole stream's events; raises unless it ends as the API ends one."""
    if api in ("chat", "completions"):
        if not data or data[-1] != "[DONE]":
            raise Failure(f"stream does not end with [DONE]: {data[-2:]}")
        texts, thoughts, finishes = {}, {}, {}
        for d in data[:-1]:
            ev = json.loads(d)
            if "error" in ev:
                raise Failure(f"error event in a stream: {d[:200]}")
            for c in ev.get("choices", []):
                piece = c.get("delta", {}).get("content") if api == "chat" else c.get("text")
                texts[c["index"]] = texts.get(c["index"], "") + (piece or "")
                thoughts[c["index"]] = thoughts.get(c["index"], "") + (
                    c.get("delta", {}).get("reasoning_content") or "" if api == "chat" else "")
                if c.get("finish_reason"):
                    if c["index"] in finishes:
                        raise Failure("two finish_reasons for one choice")
                    finishes[c["index"]] = c["finish_reason"]
        if set(finishes) != set(texts):
            raise Failure(f"choices without a finish_reason: {sorted(texts)} vs {sorted(finishes)}")
        return [thoughts[i] + SEP + texts[i] for i in sorted(texts)]
    if api == "messages":
        if not names or names[-1] != "message_stop" or names[0] != "message_start":
            raise Failure(f"messages stream events: {names[:3]} ... {names[-3:]}")
        if "message_delta" not in names:
            raise Failure("messages stream without message_delta")
        text = thought = ""
        for d in data:
            ev = json.loads(d)
            if ev.get("type") == "error":
                raise Failure(f"error event: {d[:200]}")
            if ev.get("type") == "content_block_delta" and ev["delta"].get("type") == "text_delta":
                text += ev["delta"]["text"]
            if ev.get("type") == "content_block_delta" and ev["delta"].get("type") == "thinking_delta":
                thought += ev["delta"]["thinking"]
        return [thought + SEP + text]
    if api == "responses":
        evs = [json.loads(d) for d in data]
        if [e["sequence_number"] for e in evs] != list(range(len(evs))):
            raise Failure("responses stream sequence numbers are not 0, 1, 2, ...")
        if not evs or evs[-1]["type"] not in ("response.completed", "response.incomplete"):
            raise Failure(f"responses stream ends with {evs[-1]['type'] if evs else None}")
        return ["".join(e["delta"] for e in evs if e["type"] == "response.reasoning_text.delta") + SEP +
                "".join(e["delta"] for e in evs if e["type"] == "response.output_text.delta")]
    raise ValueError(api)


def chat_from_stream(data):
    """A chat stream's one choice rebuilt as a whole answer: its content,
    thought, calls (each named by its first delta, its arguments joined) and
    finish_reason."""
    content, thought, calls, finish = "", "", {}, None
    for d in data[:-1]:
        for c in json.loads(d).get("choices", []):
            delta = c.get("delta", {})
            content += delta.get("content") or ""
            thought += delta.get("reasoning_content") or ""
            for t in delta.get("tool_calls") or []:
                if t["index"] not in calls:
                    if not t.get("id") or not t.get("function", {}).get("name"):
                        raise Failure(f"a call's first delta without its id and name: {t}")
                    calls[t["index"]] = {"id": t["id"], "type": "function",
                                         "function": {"name": t["function"]["name"], "arguments": ""}}
                elif "name" in t.get("function", {}) or "id" in t:
                    raise Failure(f"a call named twice: {t}")
                calls[t["index"]]["function"]["arguments"] += t.get("function", {}).get("arguments") or ""
            finish = c.get("finish_reason") or finish
    if sorted(calls) != list(range(len(calls))):
        raise Failure(f"call indices {sorted(calls)}")
    message = {"role": "assistant", "content": content or None, "reasoning_content": thought or None}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return {"choices": [{"index": 0, "message": message, "finish_reason": finish}]}


class Chaos:
    def __init__(self, url, model_id, rng, args):
        self.url, self.model_id, self.rng, self.args = url, model_id, rng, args
        self.lock = threading.RLock()  # next_request runs under it and may take it again
        self.counts = {}
        self.samples = {}  # kind:status -> the first answer's start (what each error said)
        self.failures = []
        self.refs = {}  # (api, question index, max_tokens, seed) -> text
        self.schema_names = []
        self.response_ids = []

    # ---- requests -------------------------------------------------------------

    def body(self, api, q, max_tokens, seed=None, **extra):
        """A body asking question q through an API (greedy unless seed)."""
        sampling = {"temperature": 0.9, "seed": seed} if seed is not None else {"temperature": 0}
        if api == "chat":
            b = {"model": self.model_id, "max_tokens": max_tokens,
                 "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTIONS[q]}]}
        elif api == "completions":
            b = {"model": self.model_id, "max_tokens": max_tokens,
                 "prompt": SYSTEM + "\nQuestion: " + QUESTIONS[q] + "\nAnswer:"}
        elif api == "messages":
            b = {"model": self.model_id, "max_tokens": max_tokens, "system": SYSTEM,
                 "messages": [{"role": "user", "content": QUESTIONS[q]}]}
        else:
            b = {"model": self.model_id, "max_output_tokens": max_tokens, "instructions": SYSTEM,
                 "input": QUESTIONS[q], "store": False}
        b.update(sampling)
        b.update(extra)
        return b

    PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions", "messages": "/v1/messages",
             "responses": "/v1/responses"}

    def reference_keys(self):
        """(api, question, max_tokens, seed or None, thinking_budget or None)."""
        keys = []
        for api in self.PATHS:
            for q in range(len(QUESTIONS)):
                keys.append((api, q, 24, None, None))
            keys.append((api, 0, 24, 7, None))
            keys.append((api, 3, 24, 11, None))
        if self.args.chat_template:  # thoughts the budget closes, and answers after them
            for q in range(4):
                for budget in (0, 2, 5):
                    keys.append(("chat", q, 24, None if q < 3 else 5, budget))
        return keys

    def keyed_body(self, key, **extra):
        api, q, mt, seed, budget = key
        if budget is not None:
            extra["thinking_budget"] = budget
        return self.body(api, q, mt, seed, **extra)

    def make_reference(self, key):
        return Request("reference", key[0], self.PATHS[key[0]], self.keyed_body(key), expect=self.refs.get(key))

    def thought_budget(self, api, body):
        """With a thinking template, most chat requests get a small budget, so
        that their answers (and constraints) come within max_tokens."""
        if self.args.chat_template and api == "chat" and self.rng.random() < 0.7:
            body["thinking_budget"] = self.rng.choice([0, 1, 3, 8])
        return body

    def exact_request(self):
        """A reference question, asked some other way that must not change its text."""
        rng = self.rng
        key = rng.choice(self.reference_keys())
        api, q, mt, seed, _ = key
        extra = {}
        if rng.random() < 0.3:
            extra["speculate"] = rng.choice(["off", "auto"])
        if api in ("chat", "completions") and rng.random() < 0.3:
            ref = self.refs[key].replace(SEP, "")
            guess = ref if rng.random() < 0.5 else ref[::-1] + " unrelated words " + ref[: len(ref) // 2]
            extra["prediction"] = {"type": "content", "content": guess}
        n = 1
        if api in ("chat", "completions") and rng.random() < 0.3:
            n = rng.randint(2, 3)
            extra["n"] = n
        if api == "messages" and rng.random() < 0.3:
            extra["system"] = [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]
        body = self.keyed_body(key, **extra)
        is_stream = rng.random() < 0.5
        if is_stream:
            body["stream"] = True
            if api == "chat" and rng.random() < 0.5:
                body["stream_options"] = {"include_usage": True}
        expect = self.refs[key] if seed is None or n == 1 else None  # seeded choices differ from each other
        return Request("exact", api, self.PATHS[api], body, expect=expect, stream=is_stream)

    def sampled_request(self):
        rng = self.rng
        api = rng.choice(["chat", "completions"])
        extra = {"n": rng.randint(1, 3), "top_p": rng.choice([0.5, 0.9, 1.0]), "top_k": rng.choice([0, 5, 40]),
                 "presence_penalty": rng.choice([0, 0.5, -1]), "frequency_penalty": rng.choice([0, 1.5])}
        if rng.random() < 0.5:
            extra["stop"] = rng.sample(["\n", ".", " the", "Books", "!!"], rng.randint(1, 3))
        if rng.random() < 0.5:
            if api == "chat":
                extra["logprobs"], extra["top_logprobs"] = True, rng.randint(0, 5)
            else:
                extra["logprobs"] = rng.randint(0, 5)
        body = self.thought_budget(api, self.body(api, rng.randrange(len(QUESTIONS)), rng.randint(1, 40),
                                                  rng.randrange(1 << 30), **extra))
        is_stream = rng.random() < 0.4
        if is_stream:
            body["stream"] = True
        return Request("sampled", api, self.PATHS[api], body, stream=is_stream)

    def hang_up_request(self):
        rng = self.rng
        api = rng.choice(list(self.PATHS))
        body = self.body(api, rng.randrange(len(QUESTIONS)), rng.randint(8, 120), rng.randrange(1000), stream=True)
        return Request("hang_up", api, self.PATHS[api], body, stream=True, hang_up_after=rng.randint(1, 6))

    def timeout_request(self):
        """A whole answer whose client leaves before it comes."""
        rng = self.rng
        api = rng.choice(list(self.PATHS))
        body = self.body(api, rng.randrange(len(QUESTIONS)), rng.randint(40, 200), rng.randrange(1000))
        return Request("leave", api, self.PATHS[api], body, must_succeed=False)

    def constrained_request(self):
        rng = self.rng
        api = rng.choice(["chat", "chat", "responses", "messages"])
        q = rng.randrange(len(QUESTIONS))
        if rng.random() < 0.15:
            schema, refused = rng.choice(REFUSED_SCHEMAS), True
        else:
            schema, refused = rng.choice(SCHEMAS), False
        body = self.thought_budget(api, self.body(api, q, 48, rng.choice([None, rng.randrange(1000)])))
        if api == "chat":
            body["response_format"] = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
        elif api == "responses":
            body["text"] = {"format": {"type": "json_schema", "name": "x", "schema": schema}}
        else:
            body["output_config"] = {"format": {"type": "json_schema", "schema": schema}}

        def check(obj_text):
            try:
                value = json.loads(obj_text)
            except ValueError:
                raise Failure(f"constrained answer is not JSON: {obj_text[:200]!r}")
            try:
                jsonschema.validate(value, schema)
            except jsonschema.ValidationError as e:
                raise Failure(f"constrained answer breaks its schema: {obj_text[:200]!r}: {e.message}")
        return Request("refused_schema" if refused else "constrained", api, self.PATHS[api], body,
                       must_succeed=not refused, check=None if refused else check)

    def tool_request(self):
        rng = self.rng
        choice = rng.choice(["auto", "required", "named", "none", "allowed"])
        tc = {"type": "function", "function": {"name": rng.choice(TOOL_NAMES)}} if choice == "named" else choice
        if choice == "allowed":  # a subset of the tools, under auto or required
            names = rng.sample(TOOL_NAMES, rng.randint(1, len(TOOL_NAMES)))
            tc = {"type": "allowed_tools", "allowed_tools": {
                "mode": rng.choice(["auto", "required"]),
                "tools": [{"type": "function", "function": {"name": n}} for n in names]}}
        body = self.thought_budget("chat", self.body("chat", rng.randrange(len(QUESTIONS)), 64, None, tools=TOOLS,
                                                     tool_choice=tc))
        if rng.random() < 0.3:
            body["parallel_tool_calls"] = False
        is_stream = rng.random() < 0.4
        if is_stream:
            body["stream"] = True
        return Request("tools_" + choice, "chat", self.PATHS["chat"], body, stream=is_stream)

    def pml_request(self):
        rng = self.rng
        with self.lock:
            names = list(self.schema_names)
        r = rng.random()
        # One schema at a time: it pins its chunks in the small pool, and a
        # reference question must still fit beside them.
        if (r < 0.25 or not names) and not names:
            name = f"chaos{rng.randrange(1 << 20)}"
            xml = open(os.path.join(ROOT, "tests", "data", "pml", "schema_mbti_short.xml")).read()
            xml = xml.replace('<schema name="mbti">', f'<schema name="{name}">', 1)
            return Request("pml_register", "chat", "/v1/schemas", None, must_succeed=False, raw_body=xml)
        name = rng.choice(names) if names else "none"
        if r < 0.35:
            return Request("pml_delete", "chat", f"/v1/schemas/{name}", None, must_succeed=False, method="DELETE")
        mods = "".join(f"<{rng.choice(pair)}/>" for pair in (("E", "I"), ("S", "N"), ("T", "F"), ("J", "P")))
        body = {"model": self.model_id, "max_tokens": rng.randint(1, 24), "temperature": 0,
                "pml": f'<prompt schema="{name}">{mods}<user>Describe Alex.</user></prompt>'}
        return Request("pml_prompt", "chat", "/v1/chat/completions", body, must_succeed=False)

    def responses_chain_request(self):
        rng = self.rng
        with self.lock:
            ids = list(self.response_ids)
        if ids and rng.random() < 0.3:
            rid = rng.choice(ids)
            method = rng.choice(["GET", "DELETE"])
            return Request("responses_" + method.lower(), "responses", f"/v1/responses/{rid}", None,
                           must_succeed=False, method=method)
        body = self.body("responses", rng.randrange(len(QUESTIONS)), rng.randint(1, 24), None)
        body["store"] = True
        if ids and rng.random() < 0.6:
            body["previous_response_id"] = rng.choice(ids)
        # An evicted or deleted previous response is a 400, so not required.
        return Request("responses_store", "responses", "/v1/responses", body, must_succeed=False)

    def mutated_request(self):
        """A valid body with one field given another value: 200 or a 4xx in the API's shape."""
        rng = self.rng
        api = rng.choice(list(self.PATHS))
        body = self.body(api, rng.randrange(len(QUESTIONS)), rng.randint(1, 16), rng.choice([None, 5]))
        pool = [None, True, -1, 0, 2**63, -2**63, 1e308, -0.5, "", "x" * 300, [], {}, [1, "a"], {"a": {"b": []}},
                "\u0000\ud7ff", 3.7]
        fields = ["model", "max_tokens", "max_output_tokens", "temperature", "top_p", "top_k", "seed", "n", "stop",
                  "messages", "prompt", "input", "instructions", "system", "logprobs", "top_logprobs", "tools",
                  "tool_choice", "response_format", "stream", "logit_bias", "stop_sequences", "metadata",
                  "previous_response_id", "prediction", "speculate", "pml", "regex", "grammar", "json_schema",
                  "chat_template_kwargs", "thinking", "text", "reasoning", "presence_penalty", "cache_control"]
        for _ in range(rng.randint(1, 3)):
            field = rng.choice(fields)
            if rng.random() < 0.2:
                body.pop(field, None)
            else:
                body[field] = copy.deepcopy(rng.choice(pool))
        if rng.random() < 0.3 and isinstance(body.get("messages"), list) and body["messages"] \
                and isinstance(body["messages"][-1], dict):  # (a mutation above may have made it [1, "a"])
            m = body["messages"][-1]
            m[rng.choice(["role", "content", "name", "tool_calls"])] = copy.deepcopy(rng.choice(pool))
        return Request("mutated", api, self.PATHS[api], body, must_succeed=False)

    def garbage_request(self):
        rng = self.rng
        api = rng.choice(list(self.PATHS))
        good = json.dumps(self.body(api, 0, 4))
        pick = rng.randrange(4)
        if pick == 0:
            raw_body = good[: rng.randrange(len(good))]
        elif pick == 1:
            raw_body = bytes(rng.randrange(256) for _ in range(rng.randint(0, 200)))
        elif pick == 2:
            raw_body = "[" * 5000 + "]" * 5000
        else:
            raw_body = good.replace('"', "'", rng.randint(1, 4))
        return Request("garbage", api, self.PATHS[api], None, must_succeed=False, raw_body=raw_body)

    def misc_request(self):
        rng = self.rng
        pick = rng.randrange(7)
        if pick == 0:
            return Request("tokenize", "chat", "/tokenize", {"content": rng.choice(QUESTIONS)})
        if pick == 1:
            ids = [rng.choice([-1, 0, 1, 2, 100, 49151, 49152, 2**31, 2**40]) for _ in range(rng.randint(0, 8))]
            return Request("detokenize", "chat", "/detokenize", {"tokens": ids}, must_succeed=False)
        if pick == 2:
            body = self.body("messages", rng.randrange(len(QUESTIONS)), 1)
            del body["max_tokens"]
            return Request("count_tokens", "messages", "/v1/messages/count_tokens", body)
        if pick == 3:
            return Request("too_long", "chat", "/v1/chat/completions",
                           self.body("chat", 0, 8, None) | {"messages": [{"role": "user", "content": "word " * 5000}]},
                           must_succeed=False)
        path = ["/metrics", "/v1/kv/tree", "/server_info", "/health", "/v1/models", "/v1/schemas"][rng.randrange(6)]
        return Request("get", "chat", path, None, method="GET")

    def next_request(self):
        r = self.rng.random()
        for share, make in ((0.30, self.exact_request), (0.12, self.sampled_request), (0.08, self.hang_up_request),
                            (0.03, self.timeout_request), (0.10, self.constrained_request),
                            (0.07, self.tool_request), (0.06, self.pml_request), (0.06, self.responses_chain_request),
                            (0.10, self.mutated_request), (0.04, self.garbage_request)):
            if r < share:
                return make()
            r -= share
        return self.misc_request()

    # ---- running and checking -------------------------------------------------

    def run(self, req):
        """Makes one request; returns its status (0: hung up on purpose). Raises Failure."""
        if req.kind == "leave":
            try:
                post(self.url, req.path, req.body, timeout=self.rng.uniform(0.05, 1.0))
            except (socket.timeout, TimeoutError):
                return 0
            return 200
        if req.stream:
            status, data, names = stream(self.url, req.path, req.body, req.hang_up_after)
            if status != 200:
                return self.judge_error(req, status, data[0])
            if req.hang_up_after is not None and len(data) >= req.hang_up_after:
                return 0
            texts = streamed_text(req.api, data, names)
            if req.kind.startswith("tools_"):
                self.check_tools(req, chat_from_stream(data))
                return 200
            self.compare(req, texts)
            return 200
        if req.raw_body is not None:
            body = req.raw_body
            headers = {"Content-Type": "application/xml"} if req.kind == "pml_register" else None
            status, hdrs, text = post(self.url, req.path, body, headers=headers)
        else:
            status, hdrs, text = post(self.url, req.path, req.body, method=req.method)
        if status != 200:
            return self.judge_error(req, status, text, hdrs)
        if req.method == "GET" and not req.path.startswith("/v1/responses"):
            return 200
        if hdrs.get("Content-Type", hdrs.get("content-type", "")).startswith("text/event-stream"):
            # A mutated body may turn stream on: the answer is then events, ended as its API ends them.
            if not (isinstance(req.body, dict) and req.body.get("stream") is True):
                raise Failure(f"{req.kind} {req.api}: events for a body without stream: true")
            lines = text.split("\n")
            data = [ln[6:] for ln in lines if ln.startswith("data: ")]
            names = [ln[7:] for ln in lines if ln.startswith("event: ")]
            streamed_text(req.api, data, names)
            return 200
        try:
            obj = json.loads(text) if req.path not in ("/metrics",) else None
        except ValueError:
            raise Failure(f"{req.kind} {req.api}: a 200 that is not JSON: {text[:200]!r}")
        if req.kind == "pml_register":
            with self.lock:
                self.schema_names.append(obj["name"])
            return 200
        if req.kind == "pml_delete":
            with self.lock:
                if req.path.rsplit("/", 1)[1] in self.schema_names:
                    self.schema_names.remove(req.path.rsplit("/", 1)[1])
            return 200
        if req.kind in ("tokenize", "detokenize", "count_tokens", "responses_get", "responses_delete"):
            return 200
        if req.kind == "responses_store":
            with self.lock:
                self.response_ids.append(obj["id"])
                del self.response_ids[:-32]
        if req.kind.startswith("tools_"):
            self.check_tools(req, obj)
            return 200
        texts = text_of(req.api, obj)
        self.compare(req, texts)
        if req.check is not None:
            finish = (obj.get("choices", [{}])[0].get("finish_reason") if req.api == "chat"
                      else obj.get("stop_reason") if req.api == "messages" else obj.get("status"))
            if finish in ("stop", "end_turn", "completed"):
                req.check(answer_of(texts[0]))
        return 200

    def check_tools(self, req, obj):
        choice = obj["choices"][0]
        calls = choice["message"].get("tool_calls") or []
        allowed = req.body["tool_choice"]["allowed_tools"] if req.kind == "tools_allowed" else None
        demanded = req.kind in ("tools_required", "tools_named") or (allowed and allowed["mode"] == "required")
        if req.kind == "tools_none" and calls:
            raise Failure("tool_choice none answered with calls")
        if demanded and choice["finish_reason"] == "tool_calls" and not calls:
            raise Failure("finish_reason tool_calls without calls")
        for k, c in enumerate(calls):
            name = c["function"]["name"]
            if name not in TOOL_NAMES:
                raise Failure(f"call of an unknown tool {name!r}")
            if req.kind == "tools_named" and name != req.body["tool_choice"]["function"]["name"]:
                raise Failure(f"named tool_choice answered with {name}")
            if allowed and name not in [t["function"]["name"] for t in allowed["tools"]]:
                raise Failure(f"allowed_tools answered with {name}, not one of {allowed['tools']}")
            try:
                json.loads(c["function"]["arguments"])
            except ValueError:
                # The last call of a reply max_tokens cut may be cut too (as far as it got).
                if not (choice["finish_reason"] == "length" and k == len(calls) - 1):
                    raise Failure(f"tool call arguments are not JSON: {c['function']['arguments'][:200]!r}")
        if demanded and choice["finish_reason"] == "stop":
            raise Failure("a demanded call ended with finish_reason stop")
        # Under auto a call the model begins is constrained: none is left
        # unparsed (the default template's calls are <tool_call> blocks).
        if req.kind in ("tools_auto", "tools_allowed") and not self.args.chat_template and choice["finish_reason"] != "length" and \
                "<tool_call>" in (choice["message"].get("content") or ""):
            raise Failure(f"a call begun under auto did not parse: {choice['message']['content'][:200]!r}")
        # A thought the model ended the reply in (never closed) is all thought: not empty.
        if not calls and not (choice["message"].get("content") or "") and choice["finish_reason"] != "length" \
                and not choice["message"].get("reasoning_content"):
            raise Failure(f"an empty answer with 200: {json.dumps(choice)[:300]} (body {json.dumps(req.body)[-300:]})")

    def compare(self, req, texts):
        if req.expect is None:
            return
        for i, t in enumerate(texts):
            if t != req.expect:
                raise Failure(f"{req.kind} {req.api} choice {i}: {t!r} != reference {req.expect!r} "
                              f"(body {json.dumps(req.body)[:300]})")

    def judge_error(self, req, status, text, headers=None):
        if status in RETRY_STATUSES:
            if headers is not None and "Retry-After" not in headers and "retry-after" not in headers:
                raise Failure(f"{status} without Retry-After: {text[:200]}")
            return status
        if status >= 500:
            raise Failure(f"{req.kind} {req.api} got {status}: {text[:300]} (body "
                          f"{(json.dumps(req.body) if req.body is not None else repr(req.raw_body))[:300]})")
        if req.must_succeed:
            raise Failure(f"{req.kind} {req.api} got {status}: {text[:300]}")
        error_shape(req.api, status, text)
        with self.lock:
            self.samples.setdefault(f"{req.kind}:{status}", text[:160])
        return status

    def count(self, kind, status):
        with self.lock:
            k = f"{kind}:{status}"
            self.counts[k] = self.counts.get(k, 0) + 1

    def fail(self, req, what):
        with self.lock:
            self.failures.append(what)
            self.counts[f"{req.kind}:FAIL"] = self.counts.get(f"{req.kind}:FAIL", 0) + 1

    def worker(self, deadline, budget):
        while time.time() < deadline:
            with self.lock:
                if budget[0] <= 0 or len(self.failures) >= 20:
                    return
                budget[0] -= 1
                try:
                    req = self.next_request()
                except Exception as e:  # the tool's own fault: said, never a silently lost client
                    self.failures.append(f"chaos.py could not make a request: {type(e).__name__}: {e}")
                    continue
            try:
                self.count(req.kind, self.run(req))
            except Failure as e:
                self.fail(req, str(e))
            except (OSError, http.client.HTTPException, ValueError, KeyError, TypeError, IndexError) as e:
                self.fail(req, f"{req.kind} {req.api}: {type(e).__name__}: {e} (body "
                               f"{(json.dumps(req.body) if req.body is not None else repr(req.raw_body))[:300]})")


def metric(url, name):
    status, _, text = post(url, "/metrics", None, method="GET")
    total = None
    for line in text.splitlines():
        m = re.match(r"chunkserve:" + name + r"(\{[^}]*\})? (\S+)$", line)
        if m:
            total = (total or 0) + float(m.group(2))
    return total


def used_chunks(url):
    _, _, text = post(url, "/metrics", None, method="GET")
    m = re.search(r'chunkserve:kv_chunks\{[^}]*state="used"\} (\d+)', text)
    return int(m.group(1)) if m else None


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "chunkserve"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--seconds", type=float, default=300)
    ap.add_argument("--requests", type=int, default=100000)
    ap.add_argument("--clients", type=int, default=12)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rss-slack", type=float, default=0.15, help="allowed RSS growth from two thirds into the load to its end")
    ap.add_argument("--chat-template", help="serve with this chat template (a thinking one, say: "
                                            "tests/data/templates/llama-cpp-deepseek-r1.jinja): thoughts, their "
                                            "budgets and constraints after them join the load")
    ap.add_argument("--server-args", default="--max-batch 8 --kv-memory 96M --ctx 1024 "
                                             "--responses-store 8 --responses-store-size 64K "
                                             "--cache-hold-memory 8M --max-waiting 24 --grace 60")
    args = ap.parse_args()

    work = tempfile.mkdtemp(prefix="chaos_")
    server_args = args.server_args.split() + ["--kv-disk", os.path.join(work, "kv"), "--kv-disk-size", "64M",
                                              "--schema-dir", os.path.join(work, "schemas")]
    if args.chat_template:
        server_args += ["--chat-template", args.chat_template]
    server = Server(args.binary, args.model, *server_args)
    url = server.url
    _, _, models = post(url, "/v1/models", None, method="GET")
    model_id = json.loads(models)["data"][0]["id"]
    chaos = Chaos(url, model_id, random.Random(args.seed), args)
    failures = chaos.failures
    report = {"seconds": args.seconds, "clients": args.clients, "seed": args.seed, "binary": args.binary,
              "chat_template": args.chat_template}
    try:
        # References, each asked alone.
        for key in chaos.reference_keys():
            req = chaos.make_reference(key)
            status, _, text = post(url, req.path, req.body)
            if status != 200:
                raise Failure(f"reference {key} got {status}: {text[:300]}")
            chaos.refs[key] = text_of(key[0], json.loads(text))[0]
        start = time.time()
        # RSS two thirds into the load and after it: the pages of the KV
        # pool, the caches and the allocator's arenas are first touched over
        # the first minutes (a 600 s run levelled off in its second half:
        # docs/benchmarks.md), so a leak is growth past that point.
        rss = []
        trace = []  # MiB every tenth of the load

        def sample_rss():
            for k in range(1, 10):
                time.sleep(args.seconds / 10)
                trace.append(round(rss_kib(server.proc.pid) / 1024))
                if k == 6:
                    rss.append(rss_kib(server.proc.pid))
        threading.Thread(target=sample_rss, daemon=True).start()
        budget = [args.requests]
        threads = [threading.Thread(target=chaos.worker, args=(start + args.seconds, budget))
                   for _ in range(args.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        report["load_seconds"] = round(time.time() - start, 1)
        # Settled: nothing runs or waits, no sequence holds a chunk (but
        # the held prefixes: cache_control's, for minutes).
        deadline = time.time() + 120
        while time.time() < deadline:
            if (metric(url, "num_requests_running") == 0 and metric(url, "num_requests_waiting") == 0
                    and used_chunks(url) == metric(url, "kv_held_chunks")):
                break
            time.sleep(0.5)
        else:
            failures.append(f"not settled after the load: running {metric(url, 'num_requests_running')}, "
                            f"waiting {metric(url, 'num_requests_waiting')}, used chunks {used_chunks(url)}, "
                            f"held {metric(url, 'kv_held_chunks')}")
        report["held_chunks"] = metric(url, "kv_held_chunks")
        # The references again, alone.
        for key in chaos.reference_keys():
            req = chaos.make_reference(key)
            status, _, text = post(url, req.path, req.body)
            got = text_of(key[0], json.loads(text))[0] if status == 200 else f"HTTP {status}"
            if got != chaos.refs[key]:
                failures.append(f"reference {key} after the load: {got!r} != {chaos.refs[key]!r}")
        rss0, rss1 = (rss[0] if rss else rss_kib(server.proc.pid)), rss_kib(server.proc.pid)
        report.update(rss_mib_before=round(rss0 / 1024, 1), rss_mib_after=round(rss1 / 1024, 1), rss_mib_trace=trace,
                      preemptions=metric(url, "num_preemptions_total"),
                      cancelled=metric(url, "requests_cancelled_total"),
                      spec_accepted=metric(url, "spec_accepted_tokens_total"),
                      disk_chunks_read=metric(url, "kv_disk_chunks_read_total"))
        if rss1 > rss0 * (1 + args.rss_slack):
            failures.append(f"RSS grew from {rss0} KiB to {rss1} KiB")
    except Failure as e:
        failures.append(str(e))
    finally:
        status = server.stop(signal.SIGTERM, timeout=180)
        if status != 0:
            failures.append(f"server exit status {status}")
        bad = [l for l in server.log if re.search(r"AddressSanitizer|runtime error:|ThreadSanitizer|LeakSanitizer", l)]
        if bad:
            failures.append("sanitizer: " + " | ".join(bad[:5]))
    report["requests"] = sum(v for k, v in chaos.counts.items())
    report["counts"] = dict(sorted(chaos.counts.items()))
    report["errors_said"] = dict(sorted(chaos.samples.items()))
    report["failures"] = failures[:20]
    print(json.dumps(report))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
