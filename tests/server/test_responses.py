"""OpenAI's Responses API (/v1/responses) through the official `openai`
client: create and stream (the same greedy text), `responses.parse` with a
Pydantic model, function calls and their outputs over three turns by
previous_response_id (the third turn's cached tokens cover the earlier
turns), `store: false`, retrieve and delete, the store's bound, an
incomplete stream's events, errors naming their field.

Run by CTest: python3 test_responses.py BINARY MODEL
"""
import json
import sys
import unittest

import openai
from pydantic import BaseModel

from harness import Server, ServedTest, raw

MODEL_ID = "SmolLM2-135M-Instruct.Q4_1"
WEATHER = [{"type": "function", "name": "get_weather", "description": "The weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]


class City(BaseModel):
    name: str
    country: str


class ResponsesTest(ServedTest):
    def create(self, **kw):
        kw.setdefault("model", MODEL_ID)
        kw.setdefault("temperature", 0)
        return self.client.responses.create(**kw)

    def test_a_response_and_its_usage(self):
        r = self.create(input="Name three colors.", instructions="Be terse.", max_output_tokens=200)
        self.assertEqual(r.object, "response")
        self.assertTrue(r.id.startswith("resp_"))
        self.assertEqual(r.status, "completed")
        self.assertEqual(r.instructions, "Be terse.")
        self.assertEqual([o.type for o in r.output], ["message"])
        self.assertTrue(r.output_text)
        u = r.usage
        self.assertEqual(u.total_tokens, u.input_tokens + u.output_tokens)
        self.assertEqual(u.output_tokens_details.reasoning_tokens, 0)
        cut = self.create(input="Tell me a long story.", max_output_tokens=5)
        self.assertEqual((cut.status, cut.incomplete_details.reason), ("incomplete", "max_output_tokens"))
        self.assertEqual(cut.usage.output_tokens, 5)

    def test_streamed_is_the_same_answer(self):
        whole = self.create(input="Count from one to ten in words.", max_output_tokens=300)
        self.assertEqual(whole.status, "completed")
        with self.client.responses.stream(model=MODEL_ID, input="Count from one to ten in words.",
                                          max_output_tokens=300, temperature=0) as s:
            deltas = [e.delta for e in s if e.type == "response.output_text.delta"]
            final = s.get_final_response()
        self.assertGreater(len(deltas), 3)
        self.assertEqual("".join(deltas), whole.output_text)
        self.assertEqual(final.output_text, whole.output_text)
        self.assertEqual(final.usage.output_tokens, whole.usage.output_tokens)

    def test_an_incomplete_stream_ends_with_its_event(self):
        body = {"model": MODEL_ID, "input": "Tell me a long story.", "max_output_tokens": 4, "stream": True}
        status, _, text = raw(self.server.url, "POST", "/v1/responses", json.dumps(body))
        self.assertEqual(status, 200)
        events = [json.loads(line[6:]) for line in text.split("\n") if line.startswith("data: ")]
        self.assertEqual([e["sequence_number"] for e in events], list(range(len(events))))
        self.assertEqual([e["type"] for e in events[:2]], ["response.created", "response.in_progress"])
        self.assertEqual(events[-1]["type"], "response.incomplete")
        self.assertEqual(events[-1]["response"]["incomplete_details"], {"reason": "max_output_tokens"})

    def test_parse_with_a_pydantic_model(self):
        r = self.client.responses.parse(model=MODEL_ID, input="Name a city in Italy.", text_format=City,
                                        temperature=0, max_output_tokens=60)
        self.assertIsInstance(r.output_parsed, City)

    def test_three_turns_of_calls_by_previous_response_id(self):
        ask = "What is the weather in Paris?"
        t1 = self.create(input=ask, tools=WEATHER, tool_choice="required")
        calls = [o for o in t1.output if o.type == "function_call"]
        self.assertEqual(len(calls), 1)
        self.assertEqual(calls[0].name, "get_weather")
        self.assertIsInstance(json.loads(calls[0].arguments)["city"], str)
        self.assertTrue(calls[0].call_id.startswith("call_"))
        t2 = self.create(previous_response_id=t1.id, tools=WEATHER, max_output_tokens=40,
                         input=[{"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny, 21 C"}])
        self.assertEqual(t2.previous_response_id, t1.id)
        t3 = self.create(previous_response_id=t2.id, tools=WEATHER, input="And tomorrow?", max_output_tokens=40)
        # The third turn's prompt starts with the earlier turns' prompts:
        # their tokens come from the cache.
        self.assertGreaterEqual(t3.usage.input_tokens_details.cached_tokens, t2.usage.input_tokens)
        self.assertGreater(t2.usage.input_tokens_details.cached_tokens, 0.8 * t1.usage.input_tokens)
        # Streamed calls name the same tool with the same arguments.
        with self.client.responses.stream(model=MODEL_ID, input=ask, tools=WEATHER, tool_choice="required",
                                          temperature=0) as s:
            # The arguments stream as they are written, in many pieces.
            pieces = sum(1 for ev in s if ev.type == "response.function_call_arguments.delta")
            final = s.get_final_response()
        self.assertGreater(pieces, 3)
        self.assertEqual([(o.name, o.arguments) for o in final.output if o.type == "function_call"],
                         [(c.name, c.arguments) for c in calls])

    def test_store_retrieve_and_delete(self):
        r = self.create(input="Hello", max_output_tokens=8)
        got = self.client.responses.retrieve(r.id)
        self.assertEqual((got.id, got.output_text, got.usage.total_tokens), (r.id, r.output_text, r.usage.total_tokens))
        self.client.responses.delete(r.id)
        with self.assertRaises(openai.NotFoundError):
            self.client.responses.retrieve(r.id)
        with self.assertRaises(openai.NotFoundError):
            self.client.responses.delete(r.id)
        unstored = self.create(input="Hello", max_output_tokens=4, store=False)
        self.assertFalse(unstored.store)
        with self.assertRaises(openai.NotFoundError):
            self.client.responses.retrieve(unstored.id)
        with self.assertRaises(openai.BadRequestError) as e:
            self.create(input="again", previous_response_id=unstored.id, max_output_tokens=4)
        self.assertEqual(e.exception.body["code"], "previous_response_not_found")
        status, _, text = raw(self.server.url, "GET", "/metrics")
        self.assertIn("chunkserve:responses_stored{", text)

    def test_errors_name_their_field(self):
        cases = [
            (dict(input=[{"type": "input_image", "image_url": "x"}]), "input[0].type"),
            (dict(input="x", tools=[{"type": "web_search"}]), "tools[0].type"),
            (dict(input="x", max_output_tokens=10 ** 6), "max_output_tokens"),
        ]
        for kw, param in cases:
            with self.subTest(param=param):
                with self.assertRaises(openai.BadRequestError) as e:
                    self.create(**kw)
                self.assertEqual(e.exception.body["param"], param)


class StoreBoundTest(unittest.TestCase):
    """--responses-store 2: the least recently used response goes first."""

    def test_the_bound(self):
        server = Server(ServedTest.binary, ServedTest.model, "--responses-store", "2")
        try:
            c = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
            ids = [c.responses.create(model=MODEL_ID, input=f"Say {w}", max_output_tokens=2).id for w in ("a", "b")]
            c.responses.retrieve(ids[0])  # a is now the most recent
            ids.append(c.responses.create(model=MODEL_ID, input="Say c", max_output_tokens=2).id)
            with self.assertRaises(openai.NotFoundError):
                c.responses.retrieve(ids[1])
            self.assertEqual(c.responses.retrieve(ids[0]).id, ids[0])
            self.assertEqual(c.responses.retrieve(ids[2]).id, ids[2])
        finally:
            self.assertEqual(server.stop(), 0)


if __name__ == "__main__":
    ServedTest.binary, ServedTest.model = sys.argv[1], sys.argv[2]
    unittest.main(argv=sys.argv[:1] + sys.argv[3:], verbosity=2)
