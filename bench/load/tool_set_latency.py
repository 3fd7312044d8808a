#!/usr/bin/env python3
"""What a tool set the server has not seen costs the first request that offers
it under tool_choice "auto" (the call grammar compiled before the request is
queued), against the same set again (the compiled-grammar cache). One-token
requests offering test_structured.py's three tools, one of them renamed each
round so the set is new; each binary serves its own server on loopback, and
the rounds alternate between them. Reported: the median wall time per
request, for a new set and for the same set again.

  bench/load/tool_set_latency.py build/chunkserve [BASELINE_BINARY] [--rounds 8]

Prints one JSON line per binary.
"""
import argparse
import copy
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "server"))
from test_structured import TOOLS  # noqa: E402
from served import Served  # noqa: E402


def ask(server, tools):
    """One one-token request offering `tools`: its wall time."""
    start = time.perf_counter()
    server.chat({"messages": [{"role": "user", "content": "What's the weather in Paris?"}], "tools": tools,
                 "max_tokens": 1, "temperature": 0})
    return time.perf_counter() - start


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("binaries", nargs="+")
    ap.add_argument("--model", default=os.path.join(HERE, "..", "..", "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--rounds", type=int, default=8)
    a = ap.parse_args()
    servers = []
    try:
        for b in a.binaries:
            servers.append(Served(b, a.model))
        times = {s.binary: {"new": [], "again": []} for s in servers}
        for r in range(a.rounds):
            tools = copy.deepcopy(TOOLS)
            tools[r % len(tools)]["function"]["name"] += f"_{r}"
            for s in servers if r % 2 == 0 else servers[::-1]:
                times[s.binary]["new"].append(ask(s, tools))
                times[s.binary]["again"].append(ask(s, tools))
    finally:
        for s in servers:
            s.stop()
    for b, t in times.items():
        print(json.dumps({"binary": b, "rounds": a.rounds, "new_set_ms": round(1000 * statistics.median(t["new"]), 1),
                          "same_set_ms": round(1000 * statistics.median(t["again"]), 1)}), flush=True)

if __name__ == "__main__":
    main()
