"""Structured outputs and tool calls through the official `openai` client:
`chat.completions.parse` with Pydantic models, `response_format` with each
JSON Schema feature (answers checked by the `jsonschema` package), `tools`
with each `tool_choice`, streamed calls against whole ones, the extras
(regex, grammar), constraints on completions and PML prompts, and bad schemas
as 400s naming their place. The default 135M model answers; the grammar makes
its answers valid.

Run by CTest: python3 test_structured.py BINARY MODEL
"""
import json
import os
import sys
import time
import unittest
from concurrent.futures import ThreadPoolExecutor
from enum import Enum
from typing import Annotated, List, Optional

import jsonschema
import openai
from pydantic import BaseModel, Field

from harness import ServedTest, metric, raw

MODEL_ID = "SmolLM2-135M-Instruct.Q4_1"


class Color(str, Enum):
    red = "red"
    green = "green"
    blue = "blue"


class Flat(BaseModel):
    name: str = Field(max_length=24)
    age: int = Field(ge=0, le=120)
    member: bool


class Address(BaseModel):
    street: str = Field(max_length=32)
    zip: str = Field(pattern=r"^[0-9]{5}$")


class Nested(BaseModel):
    name: str = Field(max_length=24)
    address: Address


class Painted(BaseModel):
    item: str = Field(max_length=24)
    color: Color


class Tagged(BaseModel):
    title: str = Field(max_length=24)
    tags: List[Annotated[str, Field(max_length=16)]] = Field(min_length=1, max_length=3)


class Maybe(BaseModel):
    name: str = Field(max_length=24)
    nickname: Optional[str] = Field(default=None, max_length=16)


MODELS = [Flat, Nested, Painted, Tagged, Maybe]

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "The current weather in a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "maxLength": 30},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "add", "description": "Adds two numbers",
        "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                       "required": ["a", "b"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "search_books", "description": "Searches the store's catalogue",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string", "maxLength": 40},
            "limit": {"type": "integer", "minimum": 1, "maximum": 10}},
            "required": ["query"], "additionalProperties": False}}},
]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
QUESTIONS = ["What's the weather in Paris?", "Add 2 and 3.", "Find books about whales.", "Is it raining in Oslo?",
             "What is 17 plus 25?"]


def check_calls(test, message, names=None):
    """Every call names a tool and its arguments are valid against that tool's schema."""
    test.assertTrue(message.tool_calls, message)
    for call in message.tool_calls:
        test.assertEqual(call.type, "function")
        test.assertTrue(call.id.startswith("call_"))
        test.assertIn(call.function.name, names or SCHEMAS)
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])


class Structured(ServedTest):
    def chat(self, content, **kw):
        return self.client.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": content}],
                                                   **kw)

    def calls_compiled(self, tools):
        """Waits until the grammar of the calls a model may begin with `tools` under
        auto is compiled: a request waits for it a second at most, and one still
        compiling then (a busy machine) goes on in the background while requests go
        without it. Bounded; each try is a one-token request."""
        deadline = time.time() + 300
        while time.time() < deadline:
            pending = metric(self.server.url, "chunkserve:constraints_total", 'outcome="pending"')
            self.chat("hi", tools=tools, max_tokens=1)
            if metric(self.server.url, "chunkserve:constraints_total", 'outcome="pending"') == pending:
                return
            time.sleep(0.5)
        self.fail("the call grammar did not compile in 300 s")

    def error(self, body):
        body.setdefault("max_tokens", 8)
        code, _, j = raw(self.server.url, "POST", "/v1/chat/completions", json.dumps(body))
        self.assertEqual(code, 400, j)
        return j["error"]

    def test_parse_returns_pydantic_objects(self):
        def ask(i):
            model = MODELS[i % len(MODELS)]
            return model, self.client.beta.chat.completions.parse(
                model=MODEL_ID, messages=[{"role": "user", "content": f"Describe a {model.__name__.lower()} record."}],
                response_format=model, seed=100 + i, max_tokens=200)
        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(ask, range(20)))
        for model, r in answers:
            choice = r.choices[0]
            self.assertEqual(choice.finish_reason, "stop", choice.message.content)
            self.assertIsInstance(choice.message.parsed, model, choice.message.content)

    def test_each_schema_feature(self):
        schemas = {
            "types": {"type": "object", "properties": {
                "s": {"type": "string", "maxLength": 10}, "i": {"type": "integer"}, "n": {"type": "number"},
                "b": {"type": "boolean"}, "z": {"type": "null"}}, "required": ["s", "i", "n", "b", "z"]},
            "enum_const": {"type": "object", "properties": {"e": {"enum": ["x", 2, None]}, "c": {"const": "fixed"}},
                           "required": ["e", "c"]},
            "closed_object": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                              "required": ["a"], "additionalProperties": False},
            "array_bounds": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9},
                             "minItems": 2, "maxItems": 4},
            "nested": {"type": "object", "properties": {"outer": {"type": "object", "properties": {
                "inner": {"type": "object", "properties": {"v": {"type": "boolean"}}, "required": ["v"]}},
                "required": ["inner"]}}, "required": ["outer"]},
            "any_of": {"type": "object", "properties": {"v": {"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 5}]}},
                       "required": ["v"]},
            "one_of": {"type": "object", "properties": {"v": {"oneOf": [{"type": "boolean"}, {"type": "null"}]}},
                       "required": ["v"]},
            "refs": {"$defs": {"point": {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
                                         "required": ["x", "y"], "additionalProperties": False}},
                     "type": "object", "properties": {"a": {"$ref": "#/$defs/point"}, "b": {"$ref": "#/$defs/point"}},
                     "required": ["a", "b"]},
            "pattern": {"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2}$"}},
                        "required": ["code"]},
            "formats": {"type": "object", "properties": {"day": {"type": "string", "format": "date"},
                                                        "ip": {"type": "string", "format": "ipv4"},
                                                        "id": {"type": "string", "format": "uuid"}},
                        "required": ["day", "ip", "id"]},
            "number_bounds": {"type": "object", "properties": {
                "p": {"type": "number", "minimum": 0, "maximum": 1},
                "k": {"type": "integer", "exclusiveMinimum": 10, "exclusiveMaximum": 20}}, "required": ["p", "k"]},
        }
        checker = jsonschema.Draft202012Validator.FORMAT_CHECKER
        for name, schema in schemas.items():
            with self.subTest(name):
                r = self.chat("Answer in JSON.", seed=7, max_tokens=300, response_format={
                    "type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}})
                text = r.choices[0].message.content
                self.assertEqual(r.choices[0].finish_reason, "stop", text)
                jsonschema.Draft202012Validator(schema, format_checker=checker).validate(json.loads(text))

    def test_json_object_regex_and_grammar(self):
        r = self.chat("Give me JSON.", seed=3, max_tokens=200, response_format={"type": "json_object"})
        self.assertIsInstance(json.loads(r.choices[0].message.content), dict)
        kept = metric(self.server.url, "chunkserve:grammar_cache_entries")
        r = self.chat("Yes or no?", seed=3, max_tokens=10, extra_body={"regex": "(yes|no)"})
        self.assertIn(r.choices[0].message.content, ("yes", "no"))
        # The regex is kept compiled, once however often asked.
        self.assertEqual(metric(self.server.url, "chunkserve:grammar_cache_entries"), kept + 1)
        self.chat("Yes or no?", seed=4, max_tokens=10, extra_body={"regex": "(yes|no)"})
        self.assertEqual(metric(self.server.url, "chunkserve:grammar_cache_entries"), kept + 1)
        self.assertGreater(metric(self.server.url, "chunkserve:grammar_cache_bytes"), 0)
        r = self.chat("Pick.", seed=3, max_tokens=10, extra_body={"grammar": 'root ::= "A" | "B" [0-9]'})
        self.assertRegex(r.choices[0].message.content, r"^(A|B[0-9])$")
        # Completions take them too.
        c = self.client.completions.create(model=MODEL_ID, prompt="The answer is", max_tokens=10, seed=3,
                                           extra_body={"guided_regex": "[0-9]{2}"})
        self.assertRegex(c.choices[0].text, r"^[0-9]{2}$")
        c = self.client.completions.create(model=MODEL_ID, prompt="JSON:", max_tokens=100, seed=3,
                                           extra_body={"response_format": {"type": "json_object"}})
        self.assertIsInstance(json.loads(c.choices[0].text), dict)

    def test_required_tool_calls_are_valid(self):
        def ask(i):
            return self.client.chat.completions.create(
                model=MODEL_ID, messages=[{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}], tools=TOOLS,
                tool_choice="required", seed=200 + i, max_tokens=200)
        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(ask, range(20)))
        for r in answers:
            choice = r.choices[0]
            self.assertEqual(choice.finish_reason, "tool_calls", choice.message)
            self.assertIsNone(choice.message.content)
            check_calls(self, choice.message)

    def test_named_function_and_one_call(self):
        r = self.chat("Hello!", tools=TOOLS, tool_choice={"type": "function", "function": {"name": "add"}},
                      parallel_tool_calls=False, seed=5, max_tokens=100)
        self.assertEqual(r.choices[0].finish_reason, "tool_calls")
        self.assertEqual(len(r.choices[0].message.tool_calls), 1)
        check_calls(self, r.choices[0].message, ["add"])

    def test_a_tools_nested_models_resolve(self):
        # pydantic writes a nested model as a $ref into the parameters' own
        # $defs; a demanded call's schema must still resolve it.
        params = Nested.model_json_schema()
        self.assertIn("$defs", params)
        tools = [{"type": "function", "function": {"name": "register", "parameters": params}}] + TOOLS[:1]
        for choice in ("required", {"type": "function", "function": {"name": "register"}}):
            r = self.chat("Register Ada at 1 Main St, 12345.", tools=tools, tool_choice=choice,
                          parallel_tool_calls=False, seed=9, max_tokens=120)
            self.assertEqual(r.choices[0].finish_reason, "tool_calls", r.choices[0].message)
            for call in r.choices[0].message.tool_calls:
                schema = params if call.function.name == "register" else SCHEMAS[call.function.name]
                jsonschema.validate(json.loads(call.function.arguments), schema)

    def test_auto_and_none(self):
        r = self.chat("What's the weather in Paris?", tools=TOOLS, seed=9, max_tokens=60)
        m = r.choices[0].message
        # The model decides: calls (then finish_reason says so) or text.
        if m.tool_calls:
            self.assertEqual(r.choices[0].finish_reason, "tool_calls")
        else:
            self.assertTrue(m.content)
        r = self.chat("Hello", tools=TOOLS, tool_choice="none", seed=9, max_tokens=20)
        self.assertIsNone(r.choices[0].message.tool_calls)
        self.assertTrue(r.choices[0].message.content)

    def test_calls_the_model_begins_under_auto_are_valid(self):
        # Under auto the model may answer or call; from a call's marker on the
        # grammar constrains it, so every call it begins names a tool and its
        # arguments follow that tool's schema, and none is left in the content
        # unparsed (this small model, asked to, wrote such calls before:
        # docs/benchmarks.md). Text before the call stays content.
        prompts = ['Repeat exactly: <tool_call>{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}'
                   '</tool_call>',
                   'Copy this line: <tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>',
                   'Reply with a tool call to get_weather for Oslo, in a <tool_call> block.']
        self.calls_compiled(TOOLS)
        def ask(i):
            return self.client.chat.completions.create(
                model=MODEL_ID, messages=[{"role": "user", "content": prompts[i // 8]}], tools=TOOLS,
                seed=300 + i % 8, temperature=0.8, max_tokens=120)
        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(ask, range(24)))
        called = 0
        for r in answers:
            choice = r.choices[0]
            if choice.message.tool_calls:
                called += 1
                self.assertEqual(choice.finish_reason, "tool_calls", choice.message)
                check_calls(self, choice.message)
            else:
                self.assertTrue(choice.message.content, choice)
            if choice.finish_reason != "length":
                self.assertNotIn("<tool_call>", choice.message.content or "", choice.message)
        self.assertGreaterEqual(called, 4)

    def test_allowed_tools_narrow_the_calls(self):
        # tool_choice allowed_tools: every tool is in the prompt (the same
        # prefix whatever the subset), and the calls name only the allowed
        # ones: required from the reply's start, auto from a call's marker
        # (the prompts below ask for the tools left out). Through the chat and
        # the Responses routes.
        def allowed(mode, names):
            return {"type": "allowed_tools", "allowed_tools": {
                "mode": mode, "tools": [{"type": "function", "function": {"name": n}} for n in names]}}
        prompts = ["What's the weather in Paris?",
                   'Copy this line: <tool_call>{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "celsius"}}'
                   '</tool_call>']
        for i in range(8):
            r = self.chat(prompts[0], tools=TOOLS, tool_choice=allowed("required", ["add"]), seed=400 + i,
                          max_tokens=100)
            self.assertEqual(r.choices[0].finish_reason, "tool_calls", r.choices[0].message)
            check_calls(self, r.choices[0].message, ["add"])
        called = 0
        for i in range(8):
            r = self.chat(prompts[1], tools=TOOLS, tool_choice=allowed("auto", ["add", "search_books"]),
                          seed=410 + i, temperature=0.8, max_tokens=100)
            if r.choices[0].message.tool_calls:
                called += 1
                check_calls(self, r.choices[0].message, ["add", "search_books"])
        self.assertGreaterEqual(called, 1)
        tools = [{"type": "function", **t["function"]} for t in TOOLS]
        r = self.client.responses.create(model=MODEL_ID, input=prompts[0], tools=tools, max_output_tokens=100,
                                         tool_choice={"type": "allowed_tools", "mode": "required",
                                                      "tools": [{"type": "function", "name": "search_books"}]})
        calls = [o for o in r.output if o.type == "function_call"]
        self.assertTrue(calls, r.output)
        for c in calls:
            self.assertEqual(c.name, "search_books")
            if c.status == "incomplete":  # sampled: the last call may be cut short by max_output_tokens
                self.assertIs(c, calls[-1])
                continue
            jsonschema.validate(json.loads(c.arguments), SCHEMAS["search_books"])
        e = self.error({"model": MODEL_ID, "messages": [{"role": "user", "content": "hi"}], "tools": TOOLS,
                        "tool_choice": allowed("auto", ["nope"])})
        self.assertEqual(e["param"], "tool_choice.allowed_tools.tools[0]")

    def test_an_answer_format_beside_tools_leaves_calls_possible(self):
        # An agent with tools and a structured final answer (the Agents SDK's
        # output_type): under auto the reply is either calls or the answer in
        # its format, each valid. Before, the format held from the first
        # token, so the model could never call.
        schema = {"type": "object", "properties": {"answer": {"type": "string", "maxLength": 40}},
                  "required": ["answer"], "additionalProperties": False}
        prompts = ['Repeat exactly: <tool_call>{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}'
                   '</tool_call>', "What is 2+2? Answer in JSON."]
        def ask(i):
            return self.client.chat.completions.create(
                model=MODEL_ID, messages=[{"role": "user", "content": prompts[i // 8]}], tools=TOOLS, seed=300 + i % 8,
                temperature=0.8, max_tokens=120,
                response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": schema}})
        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(ask, range(16)))
        kinds = set()
        for r in answers:
            choice = r.choices[0]
            if choice.message.tool_calls:
                kinds.add("calls")
                self.assertEqual(choice.finish_reason, "tool_calls", choice.message)
                check_calls(self, choice.message)
            else:
                kinds.add("answer")
                self.assertEqual(choice.finish_reason, "stop", choice.message)
                jsonschema.validate(json.loads(choice.message.content), schema)
        self.assertEqual(kinds, {"calls", "answer"})

    def streamed_calls(self, **kw):
        """A stream's calls as a client rebuilds them, the finish, the content,
        and how many deltas carried each call's arguments."""
        calls, finish, content = {}, None, ""
        for ch in self.client.chat.completions.create(stream=True, **kw):
            delta = ch.choices[0].delta
            content += delta.content or ""
            for d in delta.tool_calls or []:
                if d.index not in calls:  # a call's first delta names it
                    self.assertTrue(d.id.startswith("call_"), d)
                    self.assertTrue(d.function.name, d)
                    calls[d.index] = {"name": d.function.name, "arguments": "", "deltas": 0}
                c = calls[d.index]
                if d.function.arguments:
                    c["arguments"] += d.function.arguments
                    c["deltas"] += 1
            finish = ch.choices[0].finish_reason or finish
        return [calls[i] for i in sorted(calls)], finish, content

    def test_streamed_calls_reassemble_to_the_whole_ones(self):
        # A call written under its grammar goes out as it is written: its
        # name first, then its arguments in many deltas, which join to the
        # whole answer's arguments exactly.
        kw = dict(model=MODEL_ID, messages=[{"role": "user", "content": "Weather in Rome and 2 plus 2?"}], tools=TOOLS,
                  tool_choice="required", temperature=0, max_tokens=200)
        whole = self.client.chat.completions.create(**kw).choices[0]
        calls, finish, _ = self.streamed_calls(**kw)
        self.assertEqual(finish, "tool_calls")
        self.assertEqual([{"name": c["name"], "arguments": c["arguments"]} for c in calls],
                         [{"name": c.function.name, "arguments": c.function.arguments} for c in whole.message.tool_calls])
        for c in calls:
            self.assertGreater(c["deltas"], 3, c)

    def test_a_call_cut_short_is_the_same_streamed_or_whole(self):
        # max_tokens inside the arguments: the call as far as it got, with
        # finish_reason "length", streamed and whole alike (the stream sent it
        # as it came and cannot take it back).
        kw = dict(model=MODEL_ID, messages=[{"role": "user", "content": "What's the weather in Paris?"}], tools=TOOLS,
                  tool_choice={"type": "function", "function": {"name": "get_weather"}}, temperature=0, max_tokens=24)
        whole = self.client.chat.completions.create(**kw).choices[0]
        self.assertEqual(whole.finish_reason, "length")
        self.assertEqual(len(whole.message.tool_calls), 1, whole.message)
        args = whole.message.tool_calls[0].function.arguments
        self.assertTrue(args.startswith('{"city":'), args)
        with self.assertRaises(ValueError):
            json.loads(args)
        calls, finish, content = self.streamed_calls(**kw)
        self.assertEqual(finish, "length")
        self.assertEqual([(c["name"], c["arguments"]) for c in calls], [("get_weather", args)])
        self.assertEqual(content, whole.message.content or "")

    def test_a_call_and_its_result_in_the_next_turn(self):
        first = self.chat("What's the weather in Paris?", tools=TOOLS, tool_choice="required", seed=11, max_tokens=100)
        call = first.choices[0].message.tool_calls[0]
        msgs = [{"role": "user", "content": "What's the weather in Paris?"}, first.choices[0].message.model_dump(exclude_none=True),
                {"role": "tool", "tool_call_id": call.id, "content": "18 C and sunny"}]
        r = self.client.chat.completions.create(model=MODEL_ID, messages=msgs, tools=TOOLS, tool_choice="none",
                                                temperature=0, max_tokens=20)
        self.assertTrue(r.choices[0].message.content)

    def test_tool_definitions_are_a_cached_prefix(self):
        a = self.chat("Find books about ships.", tools=TOOLS, tool_choice="required", seed=1, max_tokens=60)
        b = self.chat("Find books about trains.", tools=TOOLS, tool_choice="required", seed=1, max_tokens=60)
        self.assertGreater(a.usage.prompt_tokens, 250)
        # Everything before the user's words is shared: the tools' system text.
        self.assertGreater(b.usage.prompt_tokens_details.cached_tokens, 250)

    def test_pml_prompts_take_response_format(self):
        here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "pml")
        with open(os.path.join(here, "schema_mbti_short.xml"), encoding="utf-8") as f:
            code, _, info = raw(self.server.url, "POST", "/v1/schemas", f.read(), {"Content-Type": "application/xml"})
        self.assertEqual(code, 200, info)
        with open(os.path.join(here, "prompt_mbti.xml"), encoding="utf-8") as f:
            prompt = f.read()
        r = self.client.chat.completions.create(model=MODEL_ID, messages=[], max_tokens=100, seed=2, extra_body={
            "pml": prompt, "response_format": {"type": "json_schema", "json_schema": {"name": "t", "schema": {
                "type": "object", "properties": {"type": {"enum": ["INTJ", "ENFP"]}}, "required": ["type"]}}}})
        self.assertIn(json.loads(r.choices[0].message.content)["type"], ("INTJ", "ENFP"))
        self.assertGreater(r.usage.prompt_tokens_details.cached_tokens, 100)
        raw(self.server.url, "DELETE", "/v1/schemas/mbti")

    def test_bad_schemas_and_grammars_are_400s(self):
        msgs = [{"role": "user", "content": "x"}]
        e = self.error({"model": MODEL_ID, "messages": msgs, "response_format": {"type": "json_schema", "json_schema": {
            "name": "a", "schema": {"type": "object", "properties": {"who": {"type": "object", "properties": {
                "age": {"type": "int"}}}}}}}})
        self.assertEqual((e["param"], e["code"]), ("response_format", "invalid_schema"))
        self.assertEqual(e["message"], 'response_format: at /properties/who/properties/age/type: type "int" is not a '
                                       'JSON type (string, number, integer, boolean, object, array, null)')
        e = self.error({"model": MODEL_ID, "messages": msgs, "tools": [{"type": "function", "function": {
            "name": "f", "parameters": {"type": "object", "properties": {"q": {"type": "string", "pattern": "(["}}}}}]})
        self.assertEqual(e["param"], "tools[0].function.parameters")
        self.assertIn("at /properties/q/pattern: pattern", e["message"])
        # What the grammar engine would not enforce is refused, not answered
        # with JSON that may break it.
        e = self.error({"model": MODEL_ID, "messages": msgs, "response_format": {"type": "json_schema", "json_schema": {
            "name": "a", "schema": {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}}}})
        self.assertEqual((e["param"], e["code"]), ("response_format", "invalid_schema"))
        self.assertTrue(e["message"].startswith("response_format: at /uniqueItems: uniqueItems (items that all differ) "
                                                "is not supported"), e["message"])
        e = self.error({"model": MODEL_ID, "messages": msgs, "tool_choice": "required", "tools": [
            {"type": "function", "function": {"name": "f", "parameters": {"allOf": [{"type": "object"}] * 2}}}]})
        self.assertEqual((e["param"], e["code"]), ("tools[0].function.parameters", "invalid_schema"))
        e = self.error({"model": MODEL_ID, "messages": msgs, "regex": "[a-"})
        self.assertEqual((e["param"], e["code"]), ("regex", "invalid_regex"))
        # SmolLM2's vocabulary has no usable token for the byte 0x06: nothing could be sampled.
        e = self.error({"model": MODEL_ID, "messages": msgs, "regex": "\x06"})
        self.assertEqual(e["message"], "regex: no token of this model's vocabulary can begin the constrained output")
        e = self.error({"model": MODEL_ID, "messages": msgs, "grammar": "root ::= undefined_rule"})
        self.assertEqual((e["param"], e["code"]), ("grammar", "invalid_grammar"))
        self.assertIn('Rule "undefined_rule" is not defined', e["message"])
        with self.assertRaises(openai.BadRequestError):
            self.chat("x", tools=TOOLS, tool_choice={"type": "function", "function": {"name": "nope"}})


if __name__ == "__main__":
    ServedTest.binary, ServedTest.model = sys.argv[1], sys.argv[2]
    unittest.main(argv=[sys.argv[0], "-v"] + sys.argv[3:])
