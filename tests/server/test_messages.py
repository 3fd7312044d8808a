"""Anthropic's Messages API (/v1/messages, /v1/messages/count_tokens) through
the official `anthropic` client: answers whole and streamed (the same greedy
text), tool use with each tool_choice and a tool_result turn, stop sequences
and a reply's start, token counts against the chat route's, prompt caching
reported as the API does, errors in the API's shape (also from the HTTP
layer and the key check, x-api-key or Bearer), the route in /metrics.

Run by CTest: python3 test_messages.py BINARY MODEL
"""
import json
import sys
import unittest

import anthropic

from harness import Server, ServedTest, raw

MODEL_ID = "SmolLM2-135M-Instruct.Q4_1"
GREEDY = {"temperature": 0}  # not in the newest client's signature; the API still takes it
WEATHER = [{"name": "get_weather", "description": "The weather in a city",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]


class MessagesTest(ServedTest):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.claude = anthropic.Anthropic(base_url=cls.server.url, api_key="unused", max_retries=0)

    def create(self, **kw):
        kw.setdefault("model", MODEL_ID)
        kw.setdefault("max_tokens", 24)
        return self.claude.messages.create(extra_body=GREEDY, **kw)

    def count(self, **kw):
        kw.setdefault("model", MODEL_ID)
        return self.claude.messages.count_tokens(**kw).input_tokens

    def test_a_message_and_its_usage(self):
        msgs = [{"role": "user", "content": "Name three colors."}]
        r = self.create(system="You are terse.", messages=msgs)
        self.assertEqual(r.type, "message")
        self.assertEqual(r.role, "assistant")
        self.assertEqual(r.model, MODEL_ID)
        self.assertTrue(r.id.startswith("msg_"))
        self.assertEqual([b.type for b in r.content], ["text"])
        self.assertTrue(r.content[0].text)
        self.assertIn(r.stop_reason, ("end_turn", "max_tokens"))
        u = r.usage
        # input_tokens are the prompt's tokens not read from the cache
        self.assertEqual(u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens,
                         self.count(system="You are terse.", messages=msgs))
        self.assertGreater(u.output_tokens, 0)

    def test_streamed_is_the_same_answer(self):
        msgs = [{"role": "user", "content": "Count from one to ten in words."}]
        whole = self.create(messages=msgs, max_tokens=30)
        with self.claude.messages.stream(model=MODEL_ID, max_tokens=30, messages=msgs, extra_body=GREEDY) as s:
            pieces = list(s.text_stream)
            final = s.get_final_message()
        self.assertGreater(len(pieces), 3)
        self.assertEqual("".join(pieces), whole.content[0].text)
        self.assertEqual(final.content[0].text, whole.content[0].text)
        self.assertEqual(final.stop_reason, whole.stop_reason)
        self.assertEqual(final.usage.output_tokens, whole.usage.output_tokens)
        self.assertEqual(final.usage.input_tokens + final.usage.cache_read_input_tokens,
                         whole.usage.input_tokens + whole.usage.cache_read_input_tokens)

    def test_raw_stream_events_in_order(self):
        body = {"model": MODEL_ID, "max_tokens": 8, "stream": True, "messages": [{"role": "user", "content": "Hi"}]}
        status, headers, text = raw(self.server.url, "POST", "/v1/messages", json.dumps(body))
        self.assertEqual(status, 200)
        self.assertTrue(headers["Content-Type"].startswith("text/event-stream"))
        names = [line[7:] for line in text.split("\n") if line.startswith("event: ")]
        self.assertEqual(names[0], "message_start")
        self.assertEqual(names[-2:], ["message_delta", "message_stop"])
        body_events = [n for n in names[1:-2] if n != "ping"]
        self.assertEqual(body_events[0], "content_block_start")
        self.assertEqual(body_events[-1], "content_block_stop")
        self.assertEqual(set(body_events[1:-1]), {"content_block_delta"})

    def test_tool_use_with_each_choice_and_a_result_turn(self):
        ask = [{"role": "user", "content": "What is the weather in Paris?"}]
        for choice in ({"type": "any"}, {"type": "tool", "name": "get_weather"}):
            with self.subTest(choice=choice):
                r = self.create(tools=WEATHER, tool_choice=choice, messages=ask, max_tokens=60)
                self.assertEqual(r.stop_reason, "tool_use")
                calls = [b for b in r.content if b.type == "tool_use"]
                self.assertGreaterEqual(len(calls), 1)
                self.assertEqual(calls[0].name, "get_weather")
                self.assertIsInstance(calls[0].input["city"], str)
                self.assertTrue(calls[0].id.startswith("toolu_"))
                with self.claude.messages.stream(model=MODEL_ID, max_tokens=60, tools=WEATHER, tool_choice=choice,
                                                 messages=ask, extra_body=GREEDY) as s:
                    # The input streams as it is written, in many pieces.
                    pieces = sum(1 for ev in s if ev.type == "content_block_delta" and ev.delta.type == "input_json_delta")
                    final = s.get_final_message()
                self.assertGreater(pieces, 3)
                self.assertEqual(final.stop_reason, "tool_use")
                self.assertEqual([(b.name, b.input) for b in final.content if b.type == "tool_use"],
                                 [(b.name, b.input) for b in calls])
        none = self.create(tools=WEATHER, tool_choice={"type": "none"}, messages=ask)
        self.assertEqual([b.type for b in none.content], ["text"])
        # The result goes back as a tool_result block; the model answers on.
        follow = self.create(tools=WEATHER, max_tokens=40, messages=ask + [
            {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in r.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": calls[0].id, "content": "sunny, 21 C"}]}])
        self.assertIn(follow.stop_reason, ("end_turn", "max_tokens", "tool_use"))
        self.assertGreater(follow.usage.cache_read_input_tokens, 0)  # the first turn's prompt is cached

    def test_stop_sequences_and_the_replys_start(self):
        msgs = [{"role": "user", "content": "Continue the list: 1, 2, 3"}, {"role": "assistant", "content": "4, 5,"}]
        r = self.create(messages=msgs, stop_sequences=["9", " 8"], max_tokens=30)
        self.assertEqual(r.stop_reason, "stop_sequence")
        self.assertEqual(r.stop_sequence, " 8")
        self.assertEqual(r.content[0].text, " 6, 7,")
        warm = self.create(messages=[{"role": "user", "content": "Warm this prompt."}], max_tokens=0)
        self.assertEqual((warm.content, warm.stop_reason, warm.usage.output_tokens), ([], "max_tokens", 0))

    def test_counts_match_the_chat_routes_prompt(self):
        msgs = [{"role": "user", "content": "Hello there"}, {"role": "assistant", "content": "Hi!"},
                {"role": "user", "content": "How are you?"}]
        chat = {"model": MODEL_ID, "messages": [{"role": "system", "content": "Be kind."}] + msgs}
        status, _, tokens = raw(self.server.url, "POST", "/tokenize", json.dumps(chat))
        self.assertEqual(status, 200)
        self.assertEqual(self.count(system="Be kind.", messages=msgs), tokens["count"])

    def test_a_long_system_prompt_is_read_from_the_cache(self):
        system = [{"type": "text", "text": " ".join(f"Rule {i}: answer in plain words." for i in range(300)),
                   "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
        first = self.create(system=system, messages=[{"role": "user", "content": "Say hi."}], max_tokens=4)
        second = self.create(system=system, messages=[{"role": "user", "content": "Say bye."}], max_tokens=4)
        prefix = self.count(system=system, messages=[{"role": "user", "content": ""}])
        self.assertGreater(prefix, 2000)
        # The first writes the marked prefix, the second reads it.
        self.assertGreaterEqual(first.usage.cache_creation_input_tokens, 0.95 * (prefix - 16))
        self.assertGreaterEqual(second.usage.cache_read_input_tokens, 0.95 * (prefix - 16))
        self.assertEqual(second.usage.cache_creation_input_tokens, 0)

    def test_errors_in_the_apis_shape(self):
        def post(body, path="/v1/messages", headers=None):
            return raw(self.server.url, "POST", path, body if isinstance(body, str) else json.dumps(body), headers)
        user = [{"role": "user", "content": "x"}]
        cases = [
            ({"model": MODEL_ID, "messages": user}, 400, "invalid_request_error", "max_tokens is required"),
            ({"model": "claude-nope", "max_tokens": 4, "messages": user}, 404, "not_found_error", "does not exist"),
            ({"model": MODEL_ID, "max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "image"}]}]},
             400, "invalid_request_error", "image blocks are not supported"),
            ({"model": MODEL_ID, "max_tokens": 2048, "messages": user, "thinking": {"type": "enabled", "budget_tokens": 1024}},
             400, "invalid_request_error", "does not think"),
            ("[" * 200 + "]" * 200, 400, "invalid_request_error", "nests 200 levels"),
            ("not json", 400, "invalid_request_error", "JSON object"),
        ]
        for body, status, kind, words in cases:
            with self.subTest(body=str(body)[:60]):
                got, _, answer = post(body)
                self.assertEqual(got, status)
                self.assertEqual(answer["type"], "error")
                self.assertEqual(answer["error"]["type"], kind)
                self.assertIn(words, answer["error"]["message"])
        got, _, answer = post({"model": MODEL_ID}, path="/v1/messages/nowhere")
        self.assertEqual((got, answer["type"], answer["error"]["type"]), (404, "error", "not_found_error"))
        with self.assertRaises(anthropic.BadRequestError) as e:
            self.create(messages=user, tools=[{"type": "web_search_20250305", "name": "web_search"}])
        self.assertIn("server tool", str(e.exception))

    def test_the_route_is_counted(self):
        self.create(messages=[{"role": "user", "content": "x"}], max_tokens=2)
        status, _, text = raw(self.server.url, "GET", "/metrics")
        self.assertEqual(status, 200)
        self.assertIn('route="/v1/messages",code="200"', text)
        self.assertIn('route="/v1/messages/count_tokens",code="200"', text)


class CacheControlTest(unittest.TestCase):
    """cache_control breakpoints hold their prefix in the tree: with 20 tools
    and a ~3.7K-token system prompt marked, a second request reads it from the
    cache, and it survives a flood of other prompts that evicts everything
    unpinned (a small pool; the holds' bound set)."""

    def test_a_held_prefix_survives_a_flood(self):
        # 113 chunks of 64 tokens; holds keep at most 65 of them. The issue
        # asked for a ~10K-token system prompt; the behaviour is the same at
        # any size, and prefill time grows with it (a 6K prompt made this one
        # test three minutes of CI), so ~3.7K, with the pool, the holds and
        # the flood scaled alike.
        server = Server(ServedTest.binary, ServedTest.model, "--kv-memory", "160M", "--cache-hold-memory", "96M")
        try:
            c = anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0)
            tools = [{"name": f"tool_{i}", "description": f"Tool number {i} looks up record {i}.",
                      "input_schema": {"type": "object", "properties": {"id": {"type": "integer"}}}} for i in range(20)]
            tools[-1]["cache_control"] = {"type": "ephemeral"}
            rules = " ".join(f"Rule {i}: keep answers short and plain." for i in range(230))
            system = [{"type": "text", "text": rules, "cache_control": {"type": "ephemeral", "ttl": "1h"}}]

            def ask(question, **kw):
                return c.messages.create(model=MODEL_ID, max_tokens=2, messages=[{"role": "user", "content": question}],
                                         extra_body=GREEDY, **kw)
            prefix = c.messages.count_tokens(model=MODEL_ID, system=system, tools=tools,
                                             messages=[{"role": "user", "content": ""}]).input_tokens - 8
            self.assertGreater(prefix, 3000)
            first = ask("Hello?", system=system, tools=tools)
            self.assertGreaterEqual(first.usage.cache_creation_input_tokens, 0.95 * prefix)
            self.assertEqual(first.usage.cache_read_input_tokens, 0)
            second = ask("Goodbye?", system=system, tools=tools)
            self.assertGreaterEqual(second.usage.cache_read_input_tokens, 0.95 * prefix)
            self.assertEqual(second.usage.cache_creation_input_tokens, 0)
            # The same long prompt without a mark, for contrast: the flood evicts it.
            plain = ask("Plain?", system=rules.replace("Rule", "Law"))
            status, _, metrics = raw(server.url, "GET", "/metrics")
            # The tools' and the system's marks close the same prefix (the tools
            # render in the system turn): held once.
            self.assertIn('chunkserve:kv_held_prefixes{model="' + MODEL_ID + '"} 1', metrics)
            for k in range(6):  # ~8K tokens of other prompts against a ~7.2K-token pool, each fitting beside the hold
                ask("Summarize.", system=" ".join(f"Item {k}-{i} of a long list." for i in range(150)))
            third = ask("Again?", system=system, tools=tools)
            self.assertGreaterEqual(third.usage.cache_read_input_tokens, 0.95 * prefix)
            unheld = ask("Plain again?", system=rules.replace("Rule", "Law"))
            self.assertLess(unheld.usage.cache_read_input_tokens, 0.5 * plain.usage.input_tokens)
        finally:
            self.assertEqual(server.stop(), 0)


class KeyTest(unittest.TestCase):
    """A server with --api-key takes it as x-api-key (Anthropic's clients)
    or Authorization: Bearer; a wrong one is a 401 in each API's shape."""

    def test_the_key_either_way(self):
        server = Server(ServedTest.binary, ServedTest.model, "--api-key", "sekret")
        try:
            ok = anthropic.Anthropic(base_url=server.url, api_key="sekret", max_retries=0)
            r = ok.messages.create(model=MODEL_ID, max_tokens=2, messages=[{"role": "user", "content": "x"}])
            self.assertEqual(r.type, "message")
            body = json.dumps({"model": MODEL_ID, "max_tokens": 2, "messages": [{"role": "user", "content": "x"}]})
            status, _, _ = raw(server.url, "POST", "/v1/messages", body, {"Authorization": "Bearer sekret"})
            self.assertEqual(status, 200)
            with self.assertRaises(anthropic.AuthenticationError):
                anthropic.Anthropic(base_url=server.url, api_key="wrong", max_retries=0).messages.create(
                    model=MODEL_ID, max_tokens=2, messages=[{"role": "user", "content": "x"}])
            status, _, answer = raw(server.url, "POST", "/v1/messages", body)
            self.assertEqual((status, answer["error"]["type"]), (401, "authentication_error"))
            status, _, answer = raw(server.url, "POST", "/v1/chat/completions", "{}", {"x-api-key": "wrong"})
            self.assertEqual((status, answer["error"]["code"]), (401, "invalid_api_key"))
        finally:
            self.assertEqual(server.stop(), 0)


if __name__ == "__main__":
    ServedTest.binary, ServedTest.model = sys.argv[1], sys.argv[2]
    unittest.main(argv=sys.argv[:1] + sys.argv[3:], verbosity=2)
