#!/usr/bin/env python3
"""Calls under tool_choice "auto": how many replies hold a valid call (a tool
that exists, arguments valid against its schema), an invalid one, a call left
unparsed in the content, or plain content. The model is asked, in three
ways, to call one of test_structured.py's tools; each prompt is sampled with
`--seeds` seeds at `--temperature`. Each binary serves its own server on
loopback, one request at a time, so the counts are the same from run to run.

  bench/load/auto_calls.py build/chunkserve [BASELINE_BINARY] [--seeds 16]

Prints one JSON line per binary.
"""
import argparse
import json
import os
import sys

import jsonschema

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "server"))
from test_structured import TOOLS  # noqa: E402
from served import Served  # noqa: E402

SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
PROMPTS = [
    'Repeat exactly: <tool_call>{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}</tool_call>',
    'Copy this line: <tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>',
    "Reply with a tool call to get_weather for Oslo, in a <tool_call> block.",
]


def valid(call):
    schema = SCHEMAS.get(call["function"]["name"])
    if schema is None:
        return False
    try:
        jsonschema.validate(json.loads(call["function"]["arguments"]), schema)
    except (ValueError, jsonschema.ValidationError):
        return False
    return True


def measure(binary, model, seeds, temperature):
    counts = {"valid_calls": 0, "invalid_calls": 0, "unparsed_calls": 0, "content": 0}
    with Served(binary, model) as server:
        for prompt in PROMPTS:
            for i in range(seeds):
                message = server.chat({"messages": [{"role": "user", "content": prompt}], "tools": TOOLS,
                                       "seed": 300 + i, "temperature": temperature,
                                       "max_tokens": 120})["choices"][0]["message"]
                calls = message.get("tool_calls") or []
                if calls:
                    counts["valid_calls" if all(valid(c) for c in calls) else "invalid_calls"] += 1
                elif "<tool_call>" in (message.get("content") or ""):
                    counts["unparsed_calls"] += 1
                else:
                    counts["content"] += 1
    return counts


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("binaries", nargs="+")
    ap.add_argument("--model", default=os.path.join(HERE, "..", "..", "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--seeds", type=int, default=16)
    ap.add_argument("--temperature", type=float, default=0.8)
    a = ap.parse_args()
    for b in a.binaries:
        print(json.dumps({"binary": b, "replies": len(PROMPTS) * a.seeds,
                          **measure(b, a.model, a.seeds, a.temperature)}), flush=True)


if __name__ == "__main__":
    main()
