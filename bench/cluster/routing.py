#!/usr/bin/env python3
"""Routing across replicas, measured (issue 29): one replica alone against 2
(or 3) replicas behind vllm-router with each policy, on a load where routing
matters. 8 system prompts of 1-2K tokens (in pairs that open with the same
~500 tokens of wording, as real prompts do), questions arriving in a seeded
random order from concurrent clients through the official openai client
(streamed, so TTFT is the first content chunk). Each replica's KV pool holds
only part of the prompts. Every configuration starts cold (fresh processes);
configurations alternate within each round.

Reports per configuration, as a table and one JSON line each: cache hit rate
(cached / prompt tokens, from usage), requests/s, TTFT p50/p99, errors, and
the ratios against the single replica of the same round.

    bench/cluster/routing.py [--rounds 2] [--replicas 2] [--policies round_robin,cache_aware,kv_aware]
                             [--requests 96] [--clients 8] [--kv-memory 160M] [--prompts 8]
                             [--binary build/chunkserve --baseline OTHER_BINARY]

With --baseline, every cluster configuration also runs on that binary (a
build of an earlier commit, say), in the same rounds.
"""
import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import openai

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
MODEL_ID = "SmolLM2-135M-Instruct.Q4_1"


def system_prompts(n=8, seed=11):
    """Pairs share an opening of ~400 tokens, then each has its own ~750 or ~1250 (prompts of 1.2K and 1.7K)."""
    rng = random.Random(seed)
    words = ("account billing refund shipping warranty order invoice delivery return exchange policy customer "
             "support agent product service premium standard express international domestic tracking").split()
    prompts = []
    for pair in range(n // 2):
        opening = f"You are the assistant of company {pair}. " + " ".join(
            f"Policy {i}: {rng.choice(words)} {rng.choice(words)} rules apply to {rng.choice(words)}." for i in range(35))
        for own in range(2):
            body = " ".join(f"Section {own}.{i}: the {rng.choice(words)} of a {rng.choice(words)} is "
                            f"{rng.choice(words)} within {rng.randint(1, 90)} days." for i in range(45 + 30 * own))
            prompts.append(opening + " " + body)
    return prompts


def start(cmd, log):
    """The process's stderr goes to `log` (the last one of each configuration stays, for a failed start)."""
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(log, "w"), start_new_session=True)


def wait_up(url, timeout=180):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if urllib.request.urlopen(url + "/health", timeout=2).status == 200:
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{url} did not come up")


def stop(proc):
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def run_load(url, jobs, prompts, clients):
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=600)

    def one(job):
        k, q = job
        t0 = time.perf_counter()
        ttft, usage = None, None
        try:
            stream = client.chat.completions.create(
                model=MODEL_ID, max_tokens=16, temperature=0, stream=True, stream_options={"include_usage": True},
                extra_body={"ignore_eos": True},
                messages=[{"role": "system", "content": prompts[k]},
                          {"role": "user", "content": f"Customer question {q}: what applies to my case?"}])
            for chunk in stream:
                if ttft is None and chunk.choices and chunk.choices[0].delta.content:
                    ttft = time.perf_counter() - t0
                if chunk.usage:
                    usage = chunk.usage
            return {"ttft": ttft, "prompt": usage.prompt_tokens, "cached": usage.prompt_tokens_details.cached_tokens}
        except openai.APIError as e:
            return {"error": f"{type(e).__name__}: {e}"}

    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        results = list(pool.map(one, jobs))
    wall = time.perf_counter() - t0
    ok = [r for r in results if "error" not in r]
    ttfts = sorted(r["ttft"] for r in ok if r["ttft"] is not None)
    pct = lambda p: ttfts[min(len(ttfts) - 1, int(p * len(ttfts)))] if ttfts else None
    return {"requests": len(jobs), "errors": len(results) - len(ok), "seconds": round(wall, 2),
            "rps": round(len(ok) / wall, 3),
            "hit_rate": round(sum(r["cached"] for r in ok) / max(1, sum(r["prompt"] for r in ok)), 4),
            "ttft_p50": round(statistics.median(ttfts), 3) if ttfts else None,
            "ttft_p99": round(pct(0.99), 3) if ttfts else None,
            "error_kinds": sorted(set(r["error"][:80] for r in results if "error" in r))}


def measure(config, args, jobs, prompts, port):
    binary = args.binary
    if config.endswith("@baseline"):
        binary = args.baseline
        config = config[: -len("@baseline")]
    os.environ["CHUNKSERVE_BINARY"] = binary  # scripts/cluster.sh's replicas
    log = os.path.join(ROOT, "build", f"routing-{config.replace(':', '-')}.log")
    if config == "single":
        proc = start([binary, "serve", "-m", MODEL, "--port", str(port + 50), "--threads", "1",
                      "--kv-memory", args.kv_memory], log)
        url = f"http://127.0.0.1:{port + 50}"
    else:
        policy = config.split(":")[1]
        proc = start([os.path.join(ROOT, "scripts", "cluster.sh"), "--replicas", str(args.replicas), "--policy", policy,
                      "--port", str(port), "--threads", "1", "--kv-memory", args.kv_memory], log)
        url = f"http://127.0.0.1:{port}"
    try:
        try:
            wait_up(url)
        except RuntimeError:
            sys.exit(f"{config} did not start; its log ({log}):\n" + open(log).read()[-3000:])
        if config != "single":
            for i in range(args.replicas):
                wait_up(f"http://127.0.0.1:{port + 1 + i}")
        return run_load(url, jobs, prompts, args.clients)
    finally:
        stop(proc)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--policies", default="round_robin,cache_aware,kv_aware")
    ap.add_argument("--requests", type=int, default=96)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--kv-memory", default="160M",
                    help="per replica (SmolLM2: 1.41 MiB per 64-token chunk; 160M holds about 70%% of the prompts)")
    ap.add_argument("--port", type=int, default=18400)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--prompts", type=int, default=8, help="system prompts (the first N of the 8)")
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "chunkserve"))
    ap.add_argument("--baseline", help="another chunkserve binary: each cluster configuration runs on it too")
    args = ap.parse_args()
    prompts = system_prompts()[: args.prompts]
    rng = random.Random(args.seed)
    jobs = [(rng.randrange(len(prompts)), q) for q in range(args.requests)]
    configs = ["single"] + [f"cluster:{p}" for p in args.policies.split(",")]
    if args.baseline:
        configs += [f"cluster:{p}@baseline" for p in args.policies.split(",")]
    results = {c: [] for c in configs}
    for rnd in range(args.rounds):
        order = configs if rnd % 2 == 0 else configs[::-1]  # alternate
        for c in order:
            r = measure(c, args, jobs, prompts, args.port)
            r.update(config=c, round=rnd, replicas=1 if c == "single" else args.replicas)
            results[c].append(r)
            print(json.dumps(r), flush=True)
    print(f"\n| configuration | cache hit rate | vs one replica | requests/s | vs one replica | TTFT p50 (s) | "
          f"TTFT p99 (s) | errors |\n|---|---|---|---|---|---|---|---|")
    base = results["single"]
    for c in configs:
        rs = results[c]
        hit = statistics.median(r["hit_rate"] for r in rs)
        rps = statistics.median(r["rps"] for r in rs)
        hit_ratio = statistics.median(r["hit_rate"] / b["hit_rate"] for r, b in zip(rs, base))
        rps_ratio = statistics.median(r["rps"] / b["rps"] for r, b in zip(rs, base))
        name = "1 replica, 1 thread" if c == "single" else f"{args.replicas} replicas x 1 thread, {c.split(':')[1]}"
        if c.endswith("@baseline"):
            name = name.replace("@baseline", "") + " (baseline binary)"
        print(f"| {name} | {hit:.1%} | {hit_ratio:.2f}x | {rps:.2f} | {rps_ratio:.2f}x | "
              f"{statistics.median(r['ttft_p50'] for r in rs):.3f} | {statistics.median(r['ttft_p99'] for r in rs):.3f} | "
              f"{sum(r['errors'] for r in rs)} |")


if __name__ == "__main__":
    main()
