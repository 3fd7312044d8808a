#!/usr/bin/env python3
"""Time to first token of a long prompt whose KV is on the disk tier after a
restart, against cold prefill of the same prompt (issue 30's measurement).

Each round, for each length, with one directory:
  cold   a server with an empty --kv-disk DIR prefills the prompt (the tier
         writes it as it is retained; SIGTERM writes the rest);
  warm   a restarted server on DIR serves it from disk, the files in the page cache;
  dropped  the same after posix_fadvise(DONTNEED) on every file in DIR (the
         page cache dropped for them, checked with fincore when it is there).
Greedy answers (16 tokens) must be identical in all three. TTFT is the client's
time to the first streamed token; start-up is the time until the server listens
(it hashes the model file for the tier's key). Medians over rounds, the three
cases alternating within each round; one JSON line per length at the end.

  bench/disk/ttft.py [--lengths 2048 4096 8064] [--rounds 3] [--binary build/chunkserve]
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
MODEL_ID = "SmolLM2-135M-Instruct.Q4_1"
sys.path.insert(0, os.path.join(ROOT, "tests", "server"))
from harness import Server  # noqa: E402


def post(url, path, body):
    req = urllib.request.Request(url + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.load(r)


def prompt_tokens(url, n):
    """n token ids of varied English text (the tokenizer's own)."""
    words = ("the store keeps a record of every order and each customer may ask about prices opening hours "
             "returns discounts events authors editions shelves and the cafe").split()
    text = " ".join(f"{words[(i * 7) % len(words)]} {i}" for i in range(n))
    ids = post(url, "/tokenize", {"content": text})["tokens"]
    assert len(ids) >= n, (len(ids), n)
    return ids[:n]


def ttft(url, ids, max_tokens=16):
    body = {"model": MODEL_ID, "prompt": ids, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "ignore_eos": True, "stream_options": {"include_usage": True}}
    req = urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
    t0 = time.perf_counter()
    first = None
    text, usage = "", None
    with urllib.request.urlopen(req, timeout=600) as r:
        for line in r:
            line = line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("choices") and chunk["choices"][0].get("text"):
                first = first or time.perf_counter()
                text += chunk["choices"][0]["text"]
            if chunk.get("usage"):
                usage = chunk["usage"]
    return first - t0, text, usage


def drop_page_cache(d):
    for root, _, names in os.walk(d):
        for n in names:
            fd = os.open(os.path.join(root, n), os.O_RDONLY)
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)


def resident_fraction(d):
    """Fraction of DIR's bytes in the page cache (fincore), or None."""
    files = [os.path.join(r, n) for r, _, ns in os.walk(d) for n in ns]
    if not files or not shutil.which("fincore"):
        return None
    out = subprocess.run(["fincore", "-b", "-n", "-o", "RES,SIZE", *files], capture_output=True, text=True).stdout
    res = size = 0
    for line in out.split("\n"):
        parts = line.split()
        if len(parts) == 2:
            res, size = res + int(parts[0]), size + int(parts[1])
    return res / size if size else None


def serve(binary, d):
    t0 = time.perf_counter()
    s = Server(binary, MODEL, "--kv-disk", d, "--kv-memory", "1G", "--max-batch", "4")
    return s, time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lengths", type=int, nargs="+", default=[2048, 4096, 8064])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "chunkserve"))
    a = ap.parse_args()
    results = {n: {"cold": [], "warm": [], "dropped": [], "startup": [], "resident_after_drop": []} for n in a.lengths}
    ids = {}
    for rnd in range(a.rounds):
        for n in a.lengths:
            d = tempfile.mkdtemp(prefix="cs_ttft_disk_")
            try:
                s, _ = serve(a.binary, d)
                if n not in ids:
                    ids[n] = prompt_tokens(s.url, n)
                cold, text, usage = ttft(s.url, ids[n])
                assert usage["prompt_tokens_details"]["cached_tokens"] == 0, usage
                assert s.stop() == 0
                texts = {"cold": text}
                for case in ("warm", "dropped"):
                    if case == "dropped":
                        drop_page_cache(d)
                        results[n]["resident_after_drop"].append(resident_fraction(d))
                    s, startup = serve(a.binary, d)
                    t, texts[case], usage = ttft(s.url, ids[n])
                    full = (n - 1) // 64 * 64
                    assert usage["prompt_tokens_details"]["cached_tokens_disk"] == full, (case, usage)
                    results[n][case].append(t)
                    results[n]["startup"].append(startup)
                    assert s.stop() == 0
                assert texts["warm"] == texts["cold"] == texts["dropped"], texts
                results[n]["cold"].append(cold)
                print(f"round {rnd + 1} n={n}: cold {cold * 1000:.0f} ms, warm {results[n]['warm'][-1] * 1000:.0f} ms, "
                      f"dropped {results[n]['dropped'][-1] * 1000:.0f} ms "
                      f"(resident after drop: {results[n]['resident_after_drop'][-1]})", file=sys.stderr, flush=True)
            finally:
                shutil.rmtree(d, ignore_errors=True)
    for n in a.lengths:
        r = results[n]
        med = {k: statistics.median(v) for k, v in r.items() if k != "resident_after_drop"}
        print(json.dumps({"prompt_tokens": n, "cold_ms": round(med["cold"] * 1000, 1),
                          "disk_warm_ms": round(med["warm"] * 1000, 1), "disk_dropped_ms": round(med["dropped"] * 1000, 1),
                          "speedup_warm": round(med["cold"] / med["warm"], 1),
                          "speedup_dropped": round(med["cold"] / med["dropped"], 1),
                          "startup_s": round(med["startup"], 2), "rounds": a.rounds,
                          "resident_after_drop": r["resident_after_drop"], "greedy_identical": True}))


if __name__ == "__main__":
    main()
