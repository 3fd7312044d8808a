"""A thinking template's thought apart from its answer, in all three APIs,
whole and streamed: the default model served with Qwen3's real chat template
(the sdist's; it speaks ChatML like the model), its reply forced by a regex
(chunkserve's extension) into <think>...</think> and an answer, so every
route sees a thought and an answer: Chat Completions' reasoning_content,
Messages' thinking blocks, Responses' reasoning items. chat_template_kwargs
reach the template (enable_thinking: false closes the thought in the
prompt; thinking disabled and reasoning effort none do the same). And a
file's own template for conversations with tools (ToolTemplateTest).

Run by CTest: python3 test_reasoning.py BINARY MODEL TEMPLATE_DIR
"""
import json
import os
import sys
import unittest

import anthropic
import openai

from harness import Server, raw

MODEL_ID = "SmolLM2-135M-Instruct.Q4_1"
FORM = r"<think>\n[a-z ]{4,30}\n</think>\n\n[A-Z][a-z ]{2,30}"
THOUGHT = dict(regex=FORM, temperature=0)


class ReasoningTest(unittest.TestCase):
    binary = model = template = None

    @classmethod
    def setUpClass(cls):
        cls.server = Server(cls.binary, cls.model, "--chat-template", cls.template)
        cls.oai = openai.OpenAI(base_url=cls.server.url + "/v1", api_key="unused", max_retries=0)
        cls.claude = anthropic.Anthropic(base_url=cls.server.url, api_key="unused", max_retries=0)

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0

    def check_split(self, thought, answer):
        self.assertRegex(thought, r"^\n[a-z ]{4,30}\n$")
        self.assertRegex(answer, r"^[A-Z][a-z ]{2,30}$")

    def test_chat_completions(self):
        msgs = [{"role": "user", "content": "What is the capital of France?"}]
        r = self.oai.chat.completions.create(model=MODEL_ID, messages=msgs, max_tokens=80, extra_body=THOUGHT)
        m = r.choices[0].message
        self.check_split(m.reasoning_content, m.content)
        stream = self.oai.chat.completions.create(model=MODEL_ID, messages=msgs, max_tokens=80, stream=True,
                                                  extra_body=THOUGHT)
        thought, answer = "", ""
        for chunk in stream:
            d = chunk.choices[0].delta if chunk.choices else None
            if d is not None:
                thought += getattr(d, "reasoning_content", None) or ""
                answer += d.content or ""
        self.assertEqual((thought, answer), (m.reasoning_content, m.content))

    def test_messages(self):
        kw = dict(model=MODEL_ID, max_tokens=2048, thinking={"type": "enabled", "budget_tokens": 1024},
                  messages=[{"role": "user", "content": "What is the capital of France?"}], extra_body=THOUGHT)
        r = self.claude.messages.create(**kw)
        self.assertEqual([b.type for b in r.content], ["thinking", "text"])
        self.check_split(r.content[0].thinking, r.content[1].text)
        with self.claude.messages.stream(**kw) as s:
            final = s.get_final_message()
        self.assertEqual([(b.type, getattr(b, "thinking", None) or getattr(b, "text", None)) for b in final.content],
                         [("thinking", r.content[0].thinking), ("text", r.content[1].text)])
        off = self.claude.messages.count_tokens(model=MODEL_ID, thinking={"type": "disabled"},
                                                messages=[{"role": "user", "content": "Hi"}]).input_tokens
        on = self.claude.messages.count_tokens(model=MODEL_ID, messages=[{"role": "user", "content": "Hi"}]).input_tokens
        self.assertGreater(off, on)  # the closed empty thought in the prompt

    def test_responses(self):
        kw = dict(model=MODEL_ID, input="What is the capital of France?", max_output_tokens=80, extra_body=THOUGHT)
        r = self.oai.responses.create(**kw)
        self.assertEqual([o.type for o in r.output], ["reasoning", "message"])
        self.check_split(r.output[0].content[0].text, r.output_text)
        self.assertGreater(r.usage.output_tokens_details.reasoning_tokens, 0)
        with self.oai.responses.stream(**kw) as s:
            deltas = [e.delta for e in s if e.type == "response.reasoning_text.delta"]
            final = s.get_final_response()
        self.assertEqual("".join(deltas), r.output[0].content[0].text)
        self.assertEqual(final.output_text, r.output_text)

    def test_template_kwargs(self):
        body = {"model": MODEL_ID, "messages": [{"role": "user", "content": "Hi"}]}
        _, _, on = raw(self.server.url, "POST", "/tokenize", json.dumps(body))
        _, _, off = raw(self.server.url, "POST", "/tokenize",
                        json.dumps({**body, "chat_template_kwargs": {"enable_thinking": False}}))
        self.assertGreater(off["count"], on["count"])
        status, _, err = raw(self.server.url, "POST", "/v1/chat/completions",
                             json.dumps({**body, "chat_template_kwargs": "no"}))
        self.assertEqual((status, err["error"]["param"]), (400, "chat_template_kwargs"))


class ChannelsTest(unittest.TestCase):
    """gpt-oss's template (harmony channels), its reply forced into an
    analysis channel and a final one: the analysis is the thought."""

    def test_channels(self):
        server = Server(ReasoningTest.binary, ReasoningTest.model, "--chat-template",
                        os.path.join(os.path.dirname(ReasoningTest.template), "openai-gpt-oss-120b.jinja"))
        try:
            form = (r"<\|channel\|>analysis<\|message\|>[a-z ]{4,30}<\|end\|><\|start\|>assistant"
                    r"<\|channel\|>final<\|message\|>[A-Z][a-z ]{2,30}")
            oai = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
            msgs = [{"role": "user", "content": "What is the capital of France?"}]
            r = oai.chat.completions.create(model=MODEL_ID, messages=msgs, max_tokens=120,
                                            extra_body={"regex": form, "temperature": 0})
            m = r.choices[0].message
            self.assertRegex(m.reasoning_content, r"^[a-z ]{4,30}$")
            self.assertRegex(m.content, r"^[A-Z][a-z ]{2,30}$")
            claude = anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0)
            with claude.messages.stream(model=MODEL_ID, max_tokens=2048, messages=msgs,
                                        thinking={"type": "enabled", "budget_tokens": 1024},
                                        extra_body={"regex": form, "temperature": 0}) as s:
                final = s.get_final_message()
            self.assertEqual([(b.type, getattr(b, "thinking", None) or getattr(b, "text", None)) for b in final.content],
                             [("thinking", m.reasoning_content), ("text", m.content)])
            # A budget of one token under a regex that lets the thought end
            # after any letter: the engine ends the analysis message and opens
            # the final one after the unbounded run's first thought token.
            short = form.replace("{4,30}<", "{1,30}<")
            free = oai.chat.completions.create(model=MODEL_ID, messages=msgs, max_tokens=120, logprobs=True,
                                               extra_body={"regex": short, "temperature": 0})
            tokens = [t.token for t in free.choices[0].logprobs.content]
            opened = next(i for i in range(len(tokens))
                          if "".join(tokens[:i + 1]) == "<|channel|>analysis<|message|>")
            cut = oai.chat.completions.create(model=MODEL_ID, messages=msgs, max_tokens=120,
                                              extra_body={"regex": short, "temperature": 0, "thinking_budget": 1})
            c = cut.choices[0].message
            self.assertEqual(c.reasoning_content, tokens[opened + 1])
            self.assertTrue(free.choices[0].message.reasoning_content.startswith(c.reasoning_content))
            self.assertRegex(c.content, r"^[A-Z][a-z ]{2,30}$")
            # Under the first regex a thought of one token may not end (it
            # needs 4 letters): the close waits for the first token after
            # which the constraint allows it, and the reply stays valid (the
            # close forced at once broke the regex; a close the reply had
            # begun itself, "<", was left in the thought).
            for budget in (1, 2, 3):
                late = oai.chat.completions.create(model=MODEL_ID, messages=msgs, max_tokens=120,
                                                   extra_body={"regex": form, "temperature": 0,
                                                               "thinking_budget": budget}).choices[0].message
                self.assertRegex(late.reasoning_content, r"^[a-z ]{4,30}$")
                self.assertTrue(m.reasoning_content.startswith(late.reasoning_content), late.reasoning_content)
                self.assertRegex(late.content, r"^[A-Z][a-z ]{2,30}$")
        finally:
            self.assertEqual(server.stop(), 0)


class BudgetTest(unittest.TestCase):
    """A thought the template opens (DeepSeek-R1's, in llama.cpp's version)
    runs to the reply's limit, all thought; with a budget the engine closes
    it after that many tokens and the answer follows."""

    def test_the_budget_closes_the_thought(self):
        server = Server(ReasoningTest.binary, ReasoningTest.model, "--chat-template",
                        os.path.join(os.path.dirname(ReasoningTest.template), "llama-cpp-deepseek-r1.jinja"))
        try:
            body = {"model": MODEL_ID, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 24,
                    "temperature": 0, "ignore_eos": True}
            status, _, free = raw(server.url, "POST", "/v1/chat/completions", json.dumps(body))
            self.assertEqual(status, 200)
            m = free["choices"][0]["message"]
            self.assertTrue(m["reasoning_content"])
            self.assertEqual(m["content"], "")  # never closed: all thought
            status, _, cut = raw(server.url, "POST", "/v1/chat/completions", json.dumps({**body, "thinking_budget": 5}))
            self.assertEqual(status, 200)
            m = cut["choices"][0]["message"]
            _, _, n = raw(server.url, "POST", "/tokenize", json.dumps({"content": m["reasoning_content"]}))
            self.assertLessEqual(len(n["tokens"]), 6)  # 5 tokens, and the close's newline
            self.assertTrue(free["choices"][0]["message"]["reasoning_content"].startswith(m["reasoning_content"].rstrip("\n")))
            self.assertTrue(m["content"])  # the answer after the close
        finally:
            self.assertEqual(server.stop(), 0)


class TemplateServerTest(unittest.TestCase):
    """One server for the class, with the template TEMPLATE (of the
    template directory)."""
    TEMPLATE = None

    @classmethod
    def setUpClass(cls):
        cls.server = Server(ReasoningTest.binary, ReasoningTest.model, "--chat-template",
                            os.path.join(os.path.dirname(ReasoningTest.template), cls.TEMPLATE))
        cls.oai = openai.OpenAI(base_url=cls.server.url + "/v1", api_key="unused", max_retries=0)

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0


class AnswerConstraintTest(TemplateServerTest):
    """A JSON constraint (response_format, a demanded tool call) is the
    answer's: in a thought the prompt opened (DeepSeek-R1's template) the
    thought is free text, the constraint starts after it, and the content is
    the constrained JSON (before, the JSON was written as the thought and the
    content came back empty)."""

    SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                               "age": {"type": "integer", "minimum": 0}},
              "required": ["name", "age"], "additionalProperties": False}
    TOOLS = [{"type": "function", "function": {"name": "hours", "parameters": {
        "type": "object", "properties": {"day": {"type": "string", "enum": ["mon", "sun"]}}, "required": ["day"]}}}]

    TEMPLATE = "llama-cpp-deepseek-r1.jinja"

    def ask(self, **extra):
        return self.oai.chat.completions.create(
            model=MODEL_ID, messages=[{"role": "user", "content": "Name someone and give their age."}],
            max_tokens=80, temperature=0, **extra)

    def test_response_format_constrains_the_answer(self):
        free = self.ask().choices[0].message.reasoning_content
        fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": self.SCHEMA}}
        r = self.ask(response_format=fmt, extra_body={"thinking_budget": 8})
        c = r.choices[0]
        self.assertEqual(c.finish_reason, "stop")
        self.assertTrue(c.message.reasoning_content)
        self.assertTrue(free.startswith(c.message.reasoning_content.rstrip("\n")), c.message.reasoning_content)
        value = json.loads(c.message.content)
        self.assertEqual(set(value), {"name", "age"})
        self.assertIsInstance(value["age"], int)
        # Streamed, the same thought and answer.
        thought = answer = ""
        for chunk in self.ask(response_format=fmt, extra_body={"thinking_budget": 8}, stream=True):
            d = chunk.choices[0].delta
            thought += getattr(d, "reasoning_content", None) or ""
            answer += d.content or ""
        self.assertEqual((thought, answer), (c.message.reasoning_content, c.message.content))
        # Any JSON object (json_object) the same way.
        j = self.ask(response_format={"type": "json_object"}, extra_body={"thinking_budget": 3}).choices[0].message
        self.assertIsInstance(json.loads(j.content), dict)
        # Without a budget the thought runs free: the model never closes it in
        # 80 tokens, so the reply is all thought and says so (length).
        long = self.ask(response_format=fmt).choices[0]
        self.assertEqual((long.finish_reason, long.message.content), ("length", ""))
        self.assertEqual(long.message.reasoning_content, free)

    def test_a_demanded_call_comes_after_the_thought(self):
        for choice in ("required", {"type": "function", "function": {"name": "hours"}}):
            c = self.ask(tools=self.TOOLS, tool_choice=choice, extra_body={"thinking_budget": 6}).choices[0]
            self.assertEqual(c.finish_reason, "tool_calls", c.message)
            self.assertTrue(c.message.reasoning_content)
            self.assertEqual([t.function.name for t in c.message.tool_calls], ["hours"])
            self.assertIn(json.loads(c.message.tool_calls[0].function.arguments)["day"], ("mon", "sun"))

    def test_a_regex_still_sees_the_whole_reply(self):
        # chunkserve's regex may spell out the thought's markup, so it is not
        # the answer's: here it ends the thought itself.
        m = self.ask(extra_body={"regex": r"[a-z ]{3,20}\n</think>\n\n[A-Z][a-z]{2,10}"}).choices[0].message
        self.assertRegex(m.reasoning_content, r"^[a-z ]{3,20}$")
        self.assertRegex(m.content, r"^[A-Z][a-z]{2,10}$")


class QwenXmlCallsTest(TemplateServerTest):
    """Qwen3-Coder's template (Qwen3.5's, Nemotron 3 Nano's and Step 3.5's
    are alike) writes calls as XML: <function=NAME> and a <parameter=KEY>
    element per argument, a string's value as text. A demanded call is
    constrained to that form (before, to Hermes' JSON, which the template
    never shows its model), read back by each parameter's type, and streamed
    as it is written."""

    TEMPLATE = "Qwen3-Coder.jinja"
    EXTRA = {}
    START, CLOSE, END = "<tool_call>\n<function=write_file>\n<parameter=", "</parameter>", "</function>\n</tool_call>"
    TOOLS = [{"type": "function", "function": {"name": "write_file", "description": "Writes a text file",
                                               "parameters": {"type": "object", "properties": {
                                                   "path": {"type": "string", "maxLength": 30},
                                                   "content": {"type": "string", "maxLength": 40},
                                                   "mode": {"type": "integer", "minimum": 0, "maximum": 511}},
                                                   "required": ["path", "content", "mode"],
                                                   "additionalProperties": False}}}]

    def test_a_demanded_call_is_written_in_xml_and_streams(self):
        import jsonschema
        ask = [{"role": "user", "content": "Save a short poem about rain to rain.txt."}]
        kw = dict(model=MODEL_ID, messages=ask, tools=self.TOOLS, tool_choice="required", temperature=0, max_tokens=300,
                  parallel_tool_calls=False, extra_body=self.EXTRA)
        whole = self.oai.chat.completions.create(logprobs=True, **kw).choices[0]
        self.assertEqual(whole.finish_reason, "tool_calls", whole.message)
        call = whole.message.tool_calls[0]
        self.assertEqual(call.function.name, "write_file")
        args = json.loads(call.function.arguments)
        jsonschema.validate(args, self.TOOLS[0]["function"]["parameters"])
        self.assertIsInstance(args["mode"], int)  # an integer's text read as JSON, a string's as text
        # Bytes joined: a token may hold part of a character (DSML's full-width bars).
        text = b"".join(bytes(t.bytes) for t in whole.logprobs.content).decode()
        if "</think>" in text:  # the call follows the thought
            text = text[text.index("</think>") + len("</think>"):].lstrip("\n")
        self.assertTrue(text.startswith(self.START), text)
        self.assertIn(self.CLOSE, text)
        self.assertTrue(text.endswith(self.END), text)
        # Streamed: the name first, then the arguments in many pieces, which
        # join to the whole answer's.
        name, arguments, pieces = None, "", 0
        for chunk in self.oai.chat.completions.create(stream=True, **kw):
            for d in chunk.choices[0].delta.tool_calls or []:
                name = name or d.function.name
                if d.function.arguments:
                    arguments += d.function.arguments
                    pieces += 1
        self.assertEqual((name, arguments), ("write_file", call.function.arguments))
        self.assertGreater(pieces, 5)
        # The next turn renders the call back in the template's XML.
        follow = self.oai.chat.completions.create(
            model=MODEL_ID, tools=self.TOOLS, max_tokens=8, temperature=0,
            messages=ask + [whole.message.model_dump(exclude_none=True),
                            {"role": "tool", "tool_call_id": call.id, "content": "saved"}])
        self.assertGreater(follow.usage.prompt_tokens_details.cached_tokens, 0)


class QwenXmlAfterAThoughtTest(QwenXmlCallsTest):
    """The same with Qwen3.5's template, whose model thinks first: the call
    follows the thought, constrained from there."""

    TEMPLATE = "Qwen3.5-4B.jinja"
    EXTRA = {"thinking_budget": 8}


class GlmCallsTest(QwenXmlCallsTest):
    """The same with GLM-4.7's template (GLM-4.6's, Ling 3.0's, Laguna's and
    Spark 2.5's are alike): <tool_call>NAME then <arg_key>/<arg_value>
    pairs."""

    TEMPLATE = "GLM-4.7-Flash.jinja"
    EXTRA = {"thinking_budget": 8}
    START, CLOSE, END = "<tool_call>write_file<arg_key>", "</arg_value>", "</tool_call>"


class MiniMaxCallsTest(QwenXmlCallsTest):
    """The same with MiniMax M2's template, whose model thinks first: one
    <minimax:tool_call> block holds the calls, each <invoke name=NAME> with
    a <parameter name=KEY> element per argument."""

    TEMPLATE = "MiniMax-M2.jinja"
    EXTRA = {"thinking_budget": 8}
    START, CLOSE, END = ('<minimax:tool_call>\n<invoke name="write_file">\n<parameter name="', "</parameter>",
                         "</invoke>\n</minimax:tool_call>")


class SeedCallsTest(QwenXmlCallsTest):
    """The same with Seed-OSS's template: Qwen's elements in a
    <seed:tool_call> block, a value without newlines around it."""

    TEMPLATE = "ByteDance-Seed-OSS.jinja"
    EXTRA = {}
    START, CLOSE, END = ("<seed:tool_call>\n<function=write_file>\n<parameter=", "</parameter>",
                         "</function>\n</seed:tool_call>")


class KimiCallsTest(QwenXmlCallsTest):
    """The same with Kimi K2's template: a section of calls, each named by
    its id (functions.NAME:INDEX) with JSON arguments."""

    TEMPLATE = "moonshotai-Kimi-K2.jinja"  # Kimi-K2-Instruct's appends to a list, which a sandbox refuses (as Hugging Face's does)
    EXTRA = {}
    START, CLOSE, END = ("<|tool_calls_section_begin|><|tool_call_begin|>functions.write_file:",
                         "<|tool_call_argument_begin|>{", "<|tool_call_end|><|tool_calls_section_end|>")


class DsmlCallsTest(QwenXmlCallsTest):
    """The same with DeepSeek V3.2's template: its DSML tags, each
    parameter's saying whether its value is text (string="true") or JSON."""

    TEMPLATE = "deepseek-ai-DeepSeek-V3.2.jinja"
    EXTRA = {}
    START, CLOSE, END = ('<\uff5cDSML\uff5cfunction_calls>\n<\uff5cDSML\uff5cinvoke name="write_file">\n'
                         '<\uff5cDSML\uff5cparameter name="path" string="true">', '"mode" string="false">',
                         "</\uff5cDSML\uff5cinvoke>\n</\uff5cDSML\uff5cfunction_calls>")


class DsmlV4CallsTest(DsmlCallsTest):
    """DeepSeek V4's: the calls in <｜DSML｜tool_calls>."""

    TEMPLATE = "deepseek-ai-DeepSeek-V4.jinja"
    START = DsmlCallsTest.START.replace("function_calls", "tool_calls")
    END = DsmlCallsTest.END.replace("function_calls", "tool_calls")


class HarmonyAnswerConstraintTest(TemplateServerTest):
    """The same with gpt-oss's template (harmony): the reply may open an
    analysis message (the thought) or go straight to its answer; a JSON
    answer is the final channel's message and a demanded call the
    commentary channel's, whichever way the reply starts (before, the
    constraint held from the reply's first token, so the model could not
    think first)."""

    SCHEMA = AnswerConstraintTest.SCHEMA
    TOOLS = [{"type": "function", "function": {"name": "hours", "description": "Opening hours",
                                               "parameters": AnswerConstraintTest.TOOLS[0]["function"]["parameters"]}}]

    TEMPLATE = "openai-gpt-oss-120b.jinja"

    def ask(self, question, **extra):
        return self.oai.chat.completions.create(
            model=MODEL_ID, messages=[{"role": "user", "content": question}], max_tokens=200, temperature=0,
            logprobs=True, **extra).choices[0]

    def test_response_format_after_the_analysis(self):
        fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": self.SCHEMA}}
        # This model opens an analysis message for the first question and
        # goes straight to the final channel for the second.
        for question, thinks in (("Name someone and give their age.", True), ("What is 2+2?", False)):
            c = self.ask(question, response_format=fmt, extra_body={"thinking_budget": 6})
            self.assertEqual(c.finish_reason, "stop")
            self.assertEqual(bool(c.message.reasoning_content), thinks, c.message)
            value = json.loads(c.message.content)
            self.assertEqual(set(value), {"name", "age"})
            text = "".join(t.token for t in c.logprobs.content)
            header = "<|channel|>final<|message|>"
            if thinks:
                header = "<|end|><|start|>assistant" + header
            self.assertTrue(text.endswith(header + c.message.content), text)
            # Streamed, the same thought and answer.
            thought = answer = ""
            for chunk in self.oai.chat.completions.create(
                    model=MODEL_ID, messages=[{"role": "user", "content": question}], max_tokens=200, temperature=0,
                    response_format=fmt, extra_body={"thinking_budget": 6}, stream=True):
                d = chunk.choices[0].delta
                thought += getattr(d, "reasoning_content", None) or ""
                answer += d.content or ""
            self.assertEqual((thought, answer), (c.message.reasoning_content or "", c.message.content))
        j = self.ask("Name someone and give their age.", response_format={"type": "json_object"},
                     extra_body={"thinking_budget": 4}).message
        self.assertTrue(j.reasoning_content)
        self.assertIsInstance(json.loads(j.content), dict)

    def test_a_demanded_call_after_the_analysis(self):
        for choice in ("required", {"type": "function", "function": {"name": "hours"}}):
            c = self.ask("Who are you?", tools=self.TOOLS, tool_choice=choice, extra_body={"thinking_budget": 5})
            self.assertEqual(c.finish_reason, "tool_calls", c.message)
            self.assertTrue(c.message.reasoning_content)
            self.assertEqual([t.function.name for t in c.message.tool_calls], ["hours"])
            self.assertIn(json.loads(c.message.tool_calls[0].function.arguments)["day"], ("mon", "sun"))


class MadeModelTest(unittest.TestCase):
    """One server for the class, on a model file the class makes (make(path))
    in a directory of its own."""

    @classmethod
    def setUpClass(cls):
        import tempfile
        cls.dir = tempfile.TemporaryDirectory()
        cls.model = os.path.join(cls.dir.name, "made.gguf")
        try:
            cls.make(cls.model)
        except unittest.SkipTest:
            cls.dir.cleanup()
            raise
        cls.server = Server(ReasoningTest.binary, cls.model)
        cls.oai = openai.OpenAI(base_url=cls.server.url + "/v1", api_key="unused", max_retries=0)
        _, _, models = raw(cls.server.url, "GET", "/v1/models", None)
        cls.model_id = models["data"][0]["id"]

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0
        cls.dir.cleanup()


class HarmonyMarkupTest(MadeModelTest):
    """gpt-oss's own vocabulary (o200k), where the harmony markup is control
    tokens, on a tiny random model of its architecture: the markup comes back
    as text (before, <|channel|> and the rest vanished from replies, so no
    channel, thought or call could be parsed), and constraints and the
    budget's close write it as the tokens the model was trained on."""

    @classmethod
    def make(cls, path):
        import subprocess
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        if not os.path.exists(os.path.join(root, "tests", "data", "vocab", "ggml-vocab-o200k.gguf")):
            raise unittest.SkipTest("no o200k vocabulary (scripts/fetch_vocabs.sh makes it)")
        subprocess.run([sys.executable, os.path.join(root, "bench", "peers", "make_synthetic.py"), "gpt-oss-tiny",
                        path], check=True, stdout=subprocess.DEVNULL)

    def test_markup_is_text(self):
        status, _, out = raw(self.server.url, "POST", "/detokenize",
                             json.dumps({"tokens": [200005, 35644, 200008, 12194, 200007, 200002]}))
        self.assertEqual((status, out["content"]), (200, "<|channel|>analysis<|message|>Hi<|end|>"))
        # A client's text that spells the markup stays text.
        status, _, out = raw(self.server.url, "POST", "/tokenize", json.dumps({"content": "<|channel|>"}))
        self.assertNotIn(200005, out["tokens"])

    def test_the_budget_closes_the_analysis_in_markup_tokens(self):
        form = (r"<\|channel\|>analysis<\|message\|>[a-z ]{1,30}<\|end\|><\|start\|>assistant"
                r"<\|channel\|>final<\|message\|>[A-Za-z ]{1,20}")
        c = self.oai.chat.completions.create(
            model=self.model_id, messages=[{"role": "user", "content": "Hi"}], max_tokens=120, temperature=0,
            logprobs=True, extra_body={"regex": form, "thinking_budget": 2}).choices[0]
        tokens = [t.token for t in c.logprobs.content]
        end = tokens.index("<|end|>")
        self.assertEqual(tokens[end:end + 6],
                         ["<|end|>", "<|start|>", "assistant", "<|channel|>", "final", "<|message|>"])
        self.assertEqual(c.message.reasoning_content, "".join(tokens[:end]).split("<|message|>", 1)[1])
        # This random model spells the opening in ordinary tokens, the last
        # of which begins the thought; two tokens of thought follow.
        opened = next(i for i in range(end) if "<|channel|>analysis<|message|>" in "".join(tokens[:i + 1]))
        self.assertEqual(end - opened - 1, 2, tokens)
        self.assertRegex(c.message.content, r"^[A-Za-z ]{1,20}$")
        self.assertEqual(c.message.content, "".join(tokens[end + 6:]))



class ToolTemplateTest(MadeModelTest):
    """A file that names a template for conversations with tools
    (tokenizer.chat_template.tool_use, as Hermes 2 Pro's and 3's and Command
    R's GGUFs do): a request that offers tools renders with it and its calls
    are read in its format; the others keep the file's default. The file is
    the default model's with Hermes 3's tool_use template added by PyPI's
    gguf (its gguf_new_metadata script, as convert_hf_to_gguf writes named
    templates)."""

    TOOLS = [{"type": "function", "function": {"name": "hours", "description": "Opening hours", "parameters": {
        "type": "object", "properties": {"day": {"type": "string", "enum": ["mon", "sun"]}}, "required": ["day"]}}}]

    @classmethod
    def make(cls, path):
        import subprocess
        import gguf
        from gguf.scripts import gguf_new_metadata
        default = gguf.GGUFReader(ReasoningTest.model).fields["tokenizer.chat_template"].contents()
        with open(os.path.join(os.path.dirname(ReasoningTest.template),
                               "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja")) as f:
            tools = f.read()
        templates = json.dumps([{"name": "default", "template": default}, {"name": "tool_use", "template": tools}])
        subprocess.run([sys.executable, gguf_new_metadata.__file__, "--force", "--chat-template", templates,
                        ReasoningTest.model, path], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def ask(self, **extra):
        return self.oai.chat.completions.create(
            model=self.model_id, messages=[{"role": "user", "content": "When do you open on Sunday?"}],
            max_tokens=40, temperature=0, **extra)

    def test_tools_render_with_the_tool_template(self):
        plain = self.ask()
        # tool_choice none: the tools are not offered, so the default template.
        none = self.ask(tools=self.TOOLS, tool_choice="none")
        self.assertEqual(none.usage.prompt_tokens, plain.usage.prompt_tokens)
        self.assertEqual(none.choices[0].message.content, plain.choices[0].message.content)
        # Offered: Hermes 3's system prompt and tool list come first (the
        # prompt /tokenize gives for the same body, as text).
        msgs = [{"role": "user", "content": "When do you open on Sunday?"}]
        _, _, ids = raw(self.server.url, "POST", "/tokenize",
                        json.dumps({"model": self.model_id, "messages": msgs, "tools": self.TOOLS}))
        _, _, text = raw(self.server.url, "POST", "/detokenize", json.dumps({"tokens": ids["tokens"]}))
        self.assertTrue(text["content"].startswith(
            "system\nYou are a function calling AI model. You are provided with function signatures within "
            "<tools></tools> XML tags."), text)
        self.assertIn('{"name": "hours", "description": "hours(day: str) - Opening hours', text["content"])
        offered = self.ask(tools=self.TOOLS, tool_choice="required")
        self.assertEqual(offered.usage.prompt_tokens, ids["count"])
        calls = offered.choices[0].message.tool_calls
        self.assertEqual(offered.choices[0].finish_reason, "tool_calls")
        self.assertEqual([c.function.name for c in calls], ["hours"])
        self.assertIn(json.loads(calls[0].function.arguments)["day"], ("mon", "sun"))
        self.assertFalse(offered.choices[0].message.content)

    def test_info_names_the_tool_template(self):
        import subprocess
        out = subprocess.run([ReasoningTest.binary, "info", "-m", self.model], check=True, capture_output=True,
                             text=True).stdout
        self.assertIn("tool template  {%- macro json_to_python_type(json_spec) %} "
                      "(tokenizer.chat_template.tool_use: conversations with tools)", out)
        self.assertIn("tool calls     hermes (the template's own format)\n", out)
        plain = subprocess.run([ReasoningTest.binary, "info", "-m", ReasoningTest.model], check=True,
                               capture_output=True, text=True).stdout
        self.assertIn("tool calls     generic (tools described in a system message", plain)


if __name__ == "__main__":
    ReasoningTest.binary, ReasoningTest.model, templates = sys.argv[1], sys.argv[2], sys.argv[3]
    ReasoningTest.template = os.path.join(templates, "Qwen-Qwen3-0.6B.jinja")
    if not os.path.exists(ReasoningTest.template):
        print("skipped: no Qwen3 template (scripts/fetch_vocabs.sh fetches it)")
        sys.exit(0)
    unittest.main(argv=sys.argv[:1] + sys.argv[4:], verbosity=2)
