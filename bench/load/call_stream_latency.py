#!/usr/bin/env python3
"""How soon a streamed tool call reaches the client: a call demanded by name
(tool_choice {"type": "function", ...}) whose arguments are long (a file's
contents, at most 600 characters), greedy, streamed through the chat route. Reported per binary, the
medians over the rounds of: the time to the call's first delta (its id and
name), to the first byte of its arguments, and to the stream's end, and how
many deltas carried arguments. Each binary serves its own server on loopback;
the rounds alternate between them; every binary must give the same call.

  bench/load/call_stream_latency.py build/chunkserve [BASELINE_BINARY] [--rounds 6]

Prints one JSON line per binary.
"""
import argparse
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from served import Served  # noqa: E402

TOOLS = [{"type": "function", "function": {
    "name": "write_file", "description": "Writes a text file",
    "parameters": {"type": "object", "properties": {"path": {"type": "string", "maxLength": 40},
                                                    "content": {"type": "string", "maxLength": 600}},
                   "required": ["path", "content"], "additionalProperties": False}}}]
BODY = {"messages": [{"role": "user", "content": "Save a short poem about the sea to sea.txt."}],
        "tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "write_file"}},
        "temperature": 0, "max_tokens": 400}


def one(server):
    first_call = first_args = None
    args, deltas, name, end = "", 0, None, 0.0
    for t, chunk in server.stream_chat(BODY):
        end = t
        for c in chunk["choices"]:
            for d in c["delta"].get("tool_calls") or []:
                if first_call is None:
                    first_call, name = t, d["function"]["name"]
                if d["function"].get("arguments"):
                    first_args = t if first_args is None else first_args
                    args += d["function"]["arguments"]
                    deltas += 1
    return {"first_call": first_call, "first_args": first_args, "end": end, "deltas": deltas,
            "call": (name, json.loads(args))}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("binaries", nargs="+")
    ap.add_argument("--model", default=os.path.join(HERE, "..", "..", "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--rounds", type=int, default=6)
    a = ap.parse_args()
    servers = []
    try:
        for b in a.binaries:
            servers.append(Served(b, a.model))
        runs = {s.binary: [] for s in servers}
        for s in servers:
            one(s)  # the grammar compiled, the prompt cached
        for r in range(a.rounds):
            for s in servers if r % 2 == 0 else servers[::-1]:
                runs[s.binary].append(one(s))
        calls = {json.dumps(run["call"]) for rs in runs.values() for run in rs}
        if len(calls) != 1:
            sys.exit(f"the binaries' calls differ: {sorted(calls)[:2]}")
        for b, rs in runs.items():
            med = lambda k: round(1000 * statistics.median(run[k] for run in rs), 1)  # noqa: E731
            print(json.dumps({"binary": b, "rounds": len(rs), "first_call_ms": med("first_call"),
                              "first_arguments_ms": med("first_args"), "end_ms": med("end"),
                              "argument_deltas": rs[0]["deltas"],
                              "arguments_chars": len(json.dumps(rs[0]["call"][1]))}))
    finally:
        for s in servers:
            s.stop()


if __name__ == "__main__":
    main()
