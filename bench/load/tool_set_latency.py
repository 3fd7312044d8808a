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
import socket
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "server"))
from test_structured import TOOLS  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served:
    def __init__(self, binary, model):
        self.binary = binary
        port = free_port()
        self.proc = subprocess.Popen([binary, "serve", "--model", model, "--host", "127.0.0.1", "--port", str(port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.url = f"http://127.0.0.1:{port}"
        for _ in range(300):
            try:
                urllib.request.urlopen(self.url + "/health", timeout=2)
                break
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.2)
        self.model = json.load(urllib.request.urlopen(self.url + "/v1/models"))["data"][0]["id"]
        self.new, self.again = [], []

    def ask(self, tools):
        body = {"model": self.model, "messages": [{"role": "user", "content": "What's the weather in Paris?"}],
                "tools": tools, "max_tokens": 1, "temperature": 0}
        req = urllib.request.Request(self.url + "/v1/chat/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
        start = time.perf_counter()
        json.load(urllib.request.urlopen(req, timeout=600))
        return time.perf_counter() - start

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("binaries", nargs="+")
    ap.add_argument("--model", default=os.path.join(HERE, "..", "..", "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--rounds", type=int, default=8)
    a = ap.parse_args()
    servers = [Served(b, a.model) for b in a.binaries]
    try:
        for r in range(a.rounds):
            tools = copy.deepcopy(TOOLS)
            tools[r % len(tools)]["function"]["name"] += f"_{r}"
            order = servers if r % 2 == 0 else servers[::-1]
            for s in order:
                s.new.append(s.ask(tools))
                s.again.append(s.ask(tools))
    finally:
        for s in servers:
            s.stop()
    for s in servers:
        print(json.dumps({"binary": s.binary, "rounds": a.rounds,
                          "new_set_ms": round(1000 * statistics.median(s.new), 1),
                          "same_set_ms": round(1000 * statistics.median(s.again), 1)}), flush=True)


if __name__ == "__main__":
    main()
