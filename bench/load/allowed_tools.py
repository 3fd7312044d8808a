#!/usr/bin/env python3
"""An agent that narrows its tools from turn to turn, two ways, on one server:
- allowed: every tool in `tools`, the turn's subset in tool_choice
  allowed_tools (the prompt's tool text the same every turn);
- subset: only the turn's subset in `tools` (the prompt's tool text changes
  where the subset does).
Each round is a conversation of `--turns` turns over `--tools` synthetic tools
(a few hundred characters each), each turn allowing a random `--allow` of
them, the same subsets for both ways. Before each timed turn one untimed
request (the allowed way's prompt) compiles that turn's call grammar (the
same for both ways: both would pay it once per new subset), so the times
compare prefills. The ways
alternate which goes first from round to round. Reported per way, over the
turns after the first: prompt tokens computed (not found in the cache) and
the median time of a one-token reply.

  bench/load/allowed_tools.py build/chunkserve [--rounds 6 --turns 5 --tools 16 --allow 3]

Prints one JSON line.
"""
import argparse
import json
import os
import random
import statistics
import time

from served import Served

HERE = os.path.dirname(os.path.abspath(__file__))
WORDS = ("account invoice order shipment customer ticket report calendar meeting document folder project task "
         "inventory warehouse payment refund subscription user team message channel").split()


def make_tools(n, rng):
    tools = []
    for i in range(n):
        noun, other = rng.sample(WORDS, 2)
        tools.append({"type": "function", "function": {
            "name": f"{noun}_{other}_{i}",
            "description": f"Looks up the {noun} records that belong to a {other}, filtered and sorted as asked; "
                           f"returns at most `limit` of them with their ids, owners and last changes.",
            "parameters": {"type": "object", "properties": {
                f"{other}_id": {"type": "string", "description": f"The {other}'s id."},
                "status": {"type": "string", "enum": ["open", "closed", "pending", "archived"]},
                "since": {"type": "string", "description": "ISO 8601 date; only records changed since."},
                "limit": {"type": "integer", "minimum": 1, "maximum": 100}},
                "required": [f"{other}_id"], "additionalProperties": False}}})
    return tools


def post(server, body):
    """The request's wall time and its usage."""
    start = time.perf_counter()
    r = server.chat(body)
    return time.perf_counter() - start, r["usage"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("binary")
    ap.add_argument("--model", default=os.path.join(HERE, "..", "..", "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--turns", type=int, default=5)
    ap.add_argument("--tools", type=int, default=16)
    ap.add_argument("--allow", type=int, default=3)
    a = ap.parse_args()
    rng = random.Random(7)
    tools = make_tools(a.tools, rng)
    names = [t["function"]["name"] for t in tools]
    out = {way: {"computed": 0, "prompt": 0, "seconds": []} for way in ("allowed", "subset")}
    warm = {"first": [], "again": []}
    with Served(a.binary, a.model) as server:
        def body(way, subset, messages):
            listed = [t for t in tools if t["function"]["name"] in subset]
            b = {"messages": messages, "max_tokens": 1, "temperature": 0}
            if way == "allowed":
                b["tools"] = tools
                b["tool_choice"] = {"type": "allowed_tools", "allowed_tools": {
                    "mode": "auto", "tools": [{"type": "function", "function": {"name": n}} for n in subset]}}
            else:
                b["tools"] = listed
            return b

        for r in range(a.rounds):
            subsets = [sorted(rng.sample(names, a.allow)) for _ in range(a.turns)]
            ways = ("allowed", "subset") if r % 2 == 0 else ("subset", "allowed")
            for way in ways:
                messages = []
                for t, subset in enumerate(subsets):
                    messages.append({"role": "user", "content": f"Round {r}, turn {t}: check the {WORDS[t]} records "
                                                                f"for {WORDS[(r + t) % len(WORDS)]} {1000 + r}."})
                    # The turn's call grammar compiled first (untimed; both ways' is the
                    # same), by the allowed way's prompt: it does not put the subset
                    # way's tool text in the cache (the allowed way's is there already).
                    seconds, _ = post(server, body("allowed", subset, [{"role": "user", "content": f"warm {r} {t} {way}"}]))
                    warm["first" if way == ways[0] else "again"].append(seconds)
                    seconds, usage = post(server, body(way, subset, messages))
                    if t > 0:
                        out[way]["computed"] += usage["prompt_tokens"] - usage["prompt_tokens_details"]["cached_tokens"]
                        out[way]["prompt"] += usage["prompt_tokens"]
                        out[way]["seconds"].append(seconds)
                    messages.append({"role": "assistant", "content": f"Checked {WORDS[t]} {t}."})
    result = {"binary": a.binary, "rounds": a.rounds, "turns": a.turns, "tools": a.tools, "allow": a.allow}
    for way, o in out.items():
        result[way] = {"prompt_tokens": o["prompt"], "computed_tokens": o["computed"],
                       "median_ms": round(1000 * statistics.median(o["seconds"]), 1)}
    # The warm-up requests: the first of each subset compiles its call grammar,
    # the second finds it in the cache.
    result["warm_up_ms"] = {k: round(1000 * statistics.median(v), 1) for k, v in warm.items()}
    result["median_ratio_subset_over_allowed"] = round(result["subset"]["median_ms"] / result["allowed"]["median_ms"], 2)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
