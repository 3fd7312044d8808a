#!/usr/bin/env python3
"""The shared-prompt load (bench/load/load_test.py) with 16 system prompts
whose KV is 3x the KV pool, without and with the disk tier, alternating
rounds, each on a fresh server with an empty tier: cache hit rate (and the
part read from disk) and requests/s. Every answer is checked against the
same request asked again without streaming (load_test.py's check).

  bench/disk/shared_load.py [--rounds 2] [--requests 160] [--clients 8]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(args, tier):
    d = tempfile.mkdtemp(prefix="cs_shared_load_")
    cmd = [sys.executable, os.path.join(ROOT, "bench", "load", "load_test.py"), "--server", "chunkserve",
           "--system-prompts", "16", "--kv-memory", args.kv_memory, "--requests", str(args.requests),
           "--clients", str(args.clients), "--parallel", "16", "--max-tokens", "16", "--disconnect", "0"]
    if tier:
        cmd += ["--kv-disk", d]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
        line = [l for l in out.stdout.strip().split("\n") if l.startswith("{")][-1]
        return json.loads(line)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--requests", type=int, default=160)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--kv-memory", default="126M", help="a third of the 16 prompts' KV (16 x 16 chunks of 1.5 MB)")
    a = ap.parse_args()
    res = {False: [], True: []}
    for r in range(a.rounds):
        for tier in (False, True):
            j = run(a, tier)
            res[tier].append(j)
            print(f"round {r + 1} tier {'on' if tier else 'off'}: {json.dumps(j)}", file=sys.stderr, flush=True)
    for tier in (False, True):
        rs = res[tier]
        print(json.dumps({"disk_tier": tier, "rounds": len(rs),
                          "requests_per_s": statistics.median(x["requests_per_s"] for x in rs),
                          "cache_hit_ratio": statistics.median(x["cache_hit_ratio"] for x in rs),
                          "disk_hit_ratio": statistics.median(x["disk_hit_ratio"] for x in rs),
                          "ttft_p50_s": statistics.median(x["ttft_p50_s"] for x in rs),
                          "ttft_p99_s": statistics.median(x["ttft_p99_s"] for x in rs),
                          "lost": sum(x["lost"] for x in rs), "mismatched": sum(x["mismatched"] for x in rs)}))


if __name__ == "__main__":
    main()
