"""Two replicas behind vllm-router (kv_aware, routing on our KV events),
started by scripts/cluster.sh on loopback: requests over three system prompts
that share their opening words are each served from cache once their prompt
is cached somewhere, the subscribers' views of both replicas match the
replicas' trees, and a replica killed mid-load costs only the requests it was
running. Also: the exported Hugging Face tokenizer (scripts/export_tokenizer.py)
tokenizes as the replicas do.

Run by CTest: python3 test_cluster.py BINARY MODEL
"""
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import openai

from harness import raw, wait_until
from kv_events_client import KvEventSubscriber, block_hash

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MODEL_ID = "SmolLM2-135M-Instruct.Q4_1"
BINARY = MODEL = None


def ports_free(base):
    for p in [base, base + 1, base + 2, base + 100, base + 101, base + 102, base + 103]:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p))
            except OSError:
                return False
    return True


def system_prompt(k):
    # Real prompts share wording: the same opening, then their own rules.
    rules = " ".join(f"Rule {i}: product {k} answers cite section {k}.{i} of the manual." for i in range(60))
    return "You are the support assistant of ACME Corporation. Be brief and polite. " + rules




class Cluster(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        rng = random.Random(os.getpid())
        cls.base = next(b for b in (rng.randrange(20000, 40000, 10) for _ in range(50)) if ports_free(b))
        env = {**os.environ, "CHUNKSERVE_BINARY": BINARY}
        cls.proc = subprocess.Popen([os.path.join(ROOT, "scripts", "cluster.sh"), "--replicas", "2", "--port",
                                     str(cls.base), "--threads", "1", "--kv-memory", "200M", "--model", MODEL],
                                    env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                    start_new_session=True)
        cls.log = []

        def read():
            for line in cls.proc.stderr:
                cls.log.append(line.rstrip("\n"))

        cls.reader = threading.Thread(target=read, daemon=True)
        cls.reader.start()
        cls.router = f"http://127.0.0.1:{cls.base}"
        cls.replicas = [f"http://127.0.0.1:{cls.base + 1 + i}" for i in range(2)]

        def up():
            try:
                return urllib.request.urlopen(cls.router + "/health", timeout=2).status == 200
            except OSError:
                return False

        if not wait_until(up, 180):
            cls.stop_cluster()
            raise RuntimeError("the cluster did not start:\n" + "\n".join(cls.log[-50:]))
        cls.subs = [KvEventSubscriber(f"tcp://127.0.0.1:{cls.base + 100 + 2 * i}",
                                      f"tcp://127.0.0.1:{cls.base + 101 + 2 * i}") for i in range(2)]
        cls.client = openai.OpenAI(base_url=cls.router + "/v1", api_key="unused", max_retries=0, timeout=120)

    @classmethod
    def stop_cluster(cls):
        if cls.proc.poll() is None:
            # Ctrl-C as a terminal sends it: SIGINT to the whole process group
            # (the script, the router, the replicas); the script stops what is left.
            os.killpg(cls.proc.pid, signal.SIGINT)
        try:
            cls.proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(cls.proc.pid, signal.SIGKILL)
            cls.proc.wait(10)

    @classmethod
    def tearDownClass(cls):
        for s in cls.subs:
            s.close()
        cls.stop_cluster()
        left = subprocess.run(["pgrep", "-f", f"--port {cls.base + 1}"], capture_output=True, text=True).stdout
        assert not left.strip(), "a replica outlived the cluster script"

    def ask(self, k, question, max_tokens=2):
        return self.client.chat.completions.create(
            model=MODEL_ID, max_tokens=max_tokens, temperature=0,
            messages=[{"role": "system", "content": system_prompt(k)}, {"role": "user", "content": question}])

    def tree(self, replica):
        return set(raw(replica, "GET", "/v1/kv/tree?blocks=1")[2]["blocks"]["hashes"])

    def blocks_of(self, k):
        """The block hashes of prompt k's system part, as a replica tokenizes it."""
        body = {"model": MODEL_ID, "messages": [{"role": "system", "content": system_prompt(k)}]}
        tokens = raw(self.replicas[0], "POST", "/tokenize", json.dumps(body))[2]["tokens"]
        out, parent = [], None
        for i in range(0, len(tokens) - 16 + 1, 16):
            parent = block_hash(parent, tokens[i:i + 16])
            out.append(parent)
        return out

    def test_1_repeats_are_served_from_cache_and_events_match_trees(self):
        for k in range(3):  # each prompt's first request caches it somewhere
            first = self.ask(k, "What is your name?")
            self.assertGreater(first.usage.prompt_tokens, 700)
        jobs = [(k, f"Question {q} about product {k}?") for q in range(4) for k in range(3)]
        random.Random(7).shuffle(jobs)
        with ThreadPoolExecutor(3) as pool:
            answers = list(pool.map(lambda j: self.ask(*j), jobs))
        for (k, q), a in zip(jobs, answers):
            self.assertGreaterEqual(a.usage.prompt_tokens_details.cached_tokens, a.usage.prompt_tokens - 40,
                                    f"prompt {k}, {q!r}: not served from cache")
        # Each prompt's blocks are on a replica, and the router's inputs (the
        # events) match what each replica holds.
        for i, r in enumerate(self.replicas):
            self.assertTrue(wait_until(lambda: set(self.subs[i].snapshot()) == self.tree(r)), f"replica {i}")
            self.assertEqual(self.subs[i].errors, [])
        for k in range(3):
            blocks = self.blocks_of(k)
            holders = [i for i, r in enumerate(self.replicas) if set(blocks) <= self.tree(r)]
            self.assertTrue(holders, f"prompt {k} is cached nowhere")

    def test_2_a_killed_replica_costs_only_its_running_requests(self):
        errors, done = [], []

        def one(j):
            # Half of them streamed: a stream cut mid-way cannot be retried elsewhere.
            try:
                if j % 2:
                    stream = self.client.chat.completions.create(
                        model=MODEL_ID, max_tokens=48, temperature=0, stream=True,
                        messages=[{"role": "system", "content": system_prompt(j % 3)},
                                  {"role": "user", "content": f"Tell me about item {j}."}])
                    done.append("".join(c.choices[0].delta.content or "" for c in stream if c.choices))
                else:
                    done.append(self.ask(j % 3, f"Tell me about item {j}.", max_tokens=48))
            except (openai.APIError, openai.APIConnectionError) as e:
                errors.append(e)

        with ThreadPoolExecutor(8) as pool:
            futures = [pool.submit(one, j) for j in range(8)]
            # The victim: a replica that is running requests now, once every
            # request has reached a replica's engine or ended (one still on its
            # way through the router when the replica dies is not counted in
            # its load, so reading the load earlier undercounts what it costs).
            loads = lambda: [raw(r, "GET", "/get_load")[2] for r in self.replicas]
            settled = lambda: sum(x["load"] for x in loads()) + len(done) + len(errors) >= 8
            wait_until(settled, 30)
            busy = lambda: [i for i, x in enumerate(loads()) if x["running"] > 0]
            running = wait_until(busy, 30)
            victim = running[-1] if running else 1
            in_flight = raw(self.replicas[victim], "GET", "/get_load")[2]["load"]
            pid = int(subprocess.run(["pgrep", "-f", f"serve .*--port {self.base + 1 + victim} "],
                                     capture_output=True, text=True).stdout.split()[0])
            os.kill(pid, signal.SIGKILL)
            for f in futures:
                f.result()
        print(f"\nkilled a replica running {in_flight} requests: {len(done)} of 8 served, {len(errors)} failed "
              f"({sorted(set(type(e).__name__ for e in errors))})", file=sys.stderr)
        self.assertTrue(running, "the victim never ran a request")
        self.assertLessEqual(len(errors), in_flight, "a request the killed replica was not running failed")
        # The router retries a whole answer elsewhere; only a stream cut mid-way is lost.
        self.assertLessEqual(len(errors), 4, "a request that was not streamed failed")
        self.assertEqual(len(done) + len(errors), 8)
        # Afterwards every request is served (the router stops sending to the dead replica).
        for j in range(6):
            self.assertEqual(self.ask(j % 3, f"After the kill {j}?").choices[0].finish_reason, "length")


class ExportedTokenizer(unittest.TestCase):
    def test_matches_the_replicas_tokenizer(self):
        from tokenizers import Tokenizer
        with tempfile.TemporaryDirectory() as d:
            subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "export_tokenizer.py"), MODEL, d],
                           check=True, capture_output=True)
            hf = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        texts = [system_prompt(1), "Hello world 12345!", "ünïcödé 漢字 🎉  tabs\there\n\n", "don't I'll  we've   x",
                 "<|im_start|>system\nHi<|im_end|>", "def f(x):\n    return x**2  # 3.14159"]
        from harness import Server
        s = Server(BINARY, MODEL)
        try:
            for t in texts:
                ours = raw(s.url, "POST", "/tokenize", json.dumps({"content": t, "add_special": True}))[2]
                self.assertEqual(hf.encode(t).ids, ours["tokens"], t)
        finally:
            self.assertEqual(s.stop(), 0)


if __name__ == "__main__":
    BINARY, MODEL = sys.argv[1], sys.argv[2]
    unittest.main(argv=sys.argv[:1], verbosity=2)
