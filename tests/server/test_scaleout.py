"""A replica behind a router: the endpoints routers probe (/version,
/server_info, /model_info, /get_load, /v1/loads, POST /flush_cache, the
model card's fields), and the KV events (vLLM's format over ZMQ) checked
against the tree: a subscriber that rebuilds the replica's blocks from the
events, after a workload that evicts, a subscriber restarted mid-way (it
catches up through the replay socket) and a flush, holds exactly the blocks
GET /v1/kv/tree?blocks=1 computes from the tree itself.

Run by CTest: python3 test_scaleout.py BINARY MODEL
"""
import json
import os
import socket
import sys
import threading
import time
import unittest
from concurrent.futures import ThreadPoolExecutor

import openai
import zmq

from harness import TSAN_LIGHT, Server, ServedTest, heavy_under_tsan_because, raw, wait_until
from kv_events_client import KvEventSubscriber

MODEL_ID = "SmolLM2-135M-Instruct.Q4_1"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prompt(family, n_words, tail=""):
    """A system-prompt-like text of a family (families share their opening)."""
    words = [f"{family}{i % 17}" if i % 3 else "rule" for i in range(n_words)]
    return "You are a support agent. " + " ".join(words) + tail




# Under ThreadSanitizer only the KV events run (the engine thread feeding the
# publisher's): these routes are plain handlers, whose threads test_api covers there.
no_new_threads = heavy_under_tsan_because("no threads beyond test_api's")


def online_nodes():
    """The NUMA nodes the kernel lists as online ("0", "0-1,4"), as a list."""
    try:
        text = open("/sys/devices/system/node/online").read().strip()
    except OSError:
        return [0]
    nodes = []
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        nodes += range(int(lo), int(hi or lo) + 1)
    return nodes or [0]


@no_new_threads
class WorkerEndpoints(ServedTest):
    server_args = ("--max-batch", "4", "--kv-events", f"tcp://127.0.0.1:{free_port()}", "--kv-event-block-size", "32")

    def get(self, path):
        code, _, body = raw(self.server.url, "GET", path)
        self.assertEqual(code, 200, body)
        return body

    def test_model_card(self):
        m = self.get("/v1/models")["data"][0]
        self.assertEqual(m["id"], MODEL_ID)
        self.assertEqual(m["owned_by"], "chunkserve")
        self.assertEqual(m["max_model_len"], 8192)
        self.assertTrue(m["root"].endswith("SmolLM2-135M-Instruct.Q4_1.gguf"), m["root"])

    def test_version_and_server_info(self):
        v = self.get("/version")["version"]
        self.assertRegex(v, r"^\d+\.\d+\.\d+$")
        for path in ("/server_info", "/get_server_info"):
            info = self.get(path)
            self.assertEqual(info["version"], v)
            self.assertEqual(info["served_model_name"], MODEL_ID)
            self.assertEqual(info["chunk_size"], 64)
            self.assertEqual(info["kv_block_size"], 32)
            self.assertEqual(info["max_batch"], 4)
            self.assertEqual(info["device"], "cpu")
            self.assertEqual(info["kv_device"], "cpu")
            self.assertEqual(info["numa"], {"policy": "off", "nodes": online_nodes()})
            self.assertTrue(info["prefix_caching"])
            # Where vLLM's routers read them.
            cfg = info["vllm_config"]
            self.assertEqual(cfg["cache_config"]["block_size"], 32)
            self.assertEqual(cfg["model_config"]["max_model_len"], 8192)
            self.assertTrue(cfg["kv_events_config"]["enable_kv_cache_events"])
            self.assertEqual(cfg["kv_events_config"]["publisher"], "zmq")
            self.assertRegex(cfg["kv_events_config"]["endpoint"], r"^tcp://127\.0\.0\.1:\d+$")

    def test_model_info(self):
        for path in ("/model_info", "/get_model_info"):
            info = self.get(path)
            self.assertTrue(info["is_generation"])
            self.assertEqual(info["model_type"], "llama")
            self.assertTrue(info["model_path"].endswith(".gguf"))

    def test_load_counts_running_and_waiting(self):
        idle = self.get("/get_load")
        self.assertEqual(idle["load"], 0)
        self.assertEqual(self.get("/v1/loads")["data"][0]["load"], 0)
        # Six long requests on a batch of four: four run, two wait.
        with ThreadPoolExecutor(6) as pool:
            futures = [pool.submit(self.client.completions.create, model=MODEL_ID, prompt=f"Count to {i}:",
                                   max_tokens=200, temperature=0, extra_body={"ignore_eos": True}) for i in range(6)]
            busy = wait_until(lambda: self.get("/get_load")["load"] == 6)
            load = self.get("/get_load")
            for f in futures:
                f.result()
        self.assertTrue(busy, load)
        self.assertEqual(load["running"], 4)
        self.assertEqual(load["waiting"], 2)
        self.assertGreater(load["kv_cache_usage"], 0)
        self.assertEqual(wait_until(lambda: self.get("/get_load")["load"] == 0), True)

    def test_flush_drops_retained_prefixes_only(self):
        schema = ('<schema name="flushtest"><system>You answer questions about the flush test, '
                  'which keeps pinned modules.</system></schema>')
        code, _, info = raw(self.server.url, "POST", "/v1/schemas", schema, {"Content-Type": "application/xml"})
        self.assertEqual(code, 200, info)
        self.client.completions.create(model=MODEL_ID, prompt=prompt("flush", 120), max_tokens=1)
        # A request runs while the cache is flushed: its chunks stay, and it finishes.
        with ThreadPoolExecutor(1) as pool:
            running = pool.submit(self.client.completions.create, model=MODEL_ID, prompt="Unrelated text first. " + prompt("live", 100),
                                  max_tokens=120, temperature=0, extra_body={"ignore_eos": True})
            self.assertTrue(wait_until(lambda: self.get("/get_load")["running"] == 1))
            code, _, flushed = raw(self.server.url, "POST", "/flush_cache", "")
            self.assertEqual(code, 200, flushed)
            self.assertTrue(flushed["flushed"])
            self.assertGreater(flushed["chunks_freed"], 0)   # the retained prompt
            self.assertGreater(flushed["chunks_in_use"], 0)  # the running request's
            self.assertGreater(flushed["chunks_pinned"], 0)  # the schema's
            self.assertEqual(running.result().usage.completion_tokens, 120)
        # The flushed prompt is computed again; the schema still serves from its pinned chunks.
        again = self.client.completions.create(model=MODEL_ID, prompt=prompt("flush", 120), max_tokens=1)
        self.assertEqual(again.usage.prompt_tokens_details.cached_tokens, 0)
        cached = self.client.chat.completions.create(model=MODEL_ID, messages=[], max_tokens=1,
                                                     extra_body={"pml": '<prompt schema="flushtest"><user>Hi</user></prompt>'})
        self.assertGreater(cached.usage.prompt_tokens_details.cached_tokens, 0)
        self.assertEqual(raw(self.server.url, "DELETE", "/v1/schemas/flushtest")[0], 200)

    def test_blocks_need_events(self):
        with_events = self.get("/v1/kv/tree?blocks=1")["blocks"]
        self.assertEqual(with_events["block_size"], 32)
        self.assertEqual(with_events["count"], len(with_events["hashes"]))


@no_new_threads
class KeyProtectsRouterEndpoints(unittest.TestCase):
    def test_every_router_endpoint_needs_the_key(self):
        s = Server(ServedTest.binary, ServedTest.model, "--api-key", "sekret")
        try:
            for method, path in [("GET", "/version"), ("GET", "/server_info"), ("GET", "/get_server_info"),
                                 ("GET", "/model_info"), ("GET", "/get_model_info"), ("GET", "/get_load"),
                                 ("GET", "/v1/loads"), ("POST", "/flush_cache")]:
                code, _, body = raw(s.url, method, path, "")
                self.assertEqual(code, 401, path)
                self.assertEqual(body["error"]["code"], "invalid_api_key")
                code, _, body = raw(s.url, method, path, "", {"Authorization": "Bearer sekret"})
                self.assertEqual(code, 200, (path, body))
            code, _, body = raw(s.url, "GET", "/v1/kv/tree?blocks=1", None, {"Authorization": "Bearer sekret"})
            self.assertEqual(code, 400)
            self.assertEqual(body["error"]["code"], "kv_events_disabled")
        finally:
            self.assertEqual(s.stop(), 0)


# Under ThreadSanitizer (whose instrumented kernels prefill a few tokens a
# second) the KV-event tests' prompts are a third as long and their pool half
# as large: the engine-to-publisher handoff they check is the same.
class KvEvents(unittest.TestCase):
    """A small pool (16 MiB: 11 chunks, 704 tokens; 8 MiB under ThreadSanitizer) so that a light workload evicts."""

    @classmethod
    def setUpClass(cls):
        cls.pub = f"tcp://127.0.0.1:{free_port()}"
        cls.replay = f"tcp://127.0.0.1:{free_port()}"
        cls.server = Server(ServedTest.binary, ServedTest.model, "--max-batch", "4",
                            "--kv-memory", "8M" if TSAN_LIGHT else "16M",
                            "--kv-events", cls.pub, "--kv-events-replay", cls.replay)
        cls.client = openai.OpenAI(base_url=cls.server.url + "/v1", api_key="unused", max_retries=0)

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0

    def tree_blocks(self):
        body = raw(self.server.url, "GET", "/v1/kv/tree?blocks=1")[2]
        self.assertEqual(body["blocks"]["block_size"], 16)
        return set(body["blocks"]["hashes"])

    def matches_tree(self, sub):
        """The subscriber's blocks equal the tree's (polled: events are sent a moment after each step)."""
        return wait_until(lambda: set(sub.snapshot()) == self.tree_blocks())

    def run_load(self, families, per_family, seed):
        jobs = [(f, q) for q in range(per_family) for f in families]
        jobs = jobs[seed % len(jobs):] + jobs[:seed % len(jobs)]
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda j: self.client.completions.create(
                model=MODEL_ID, prompt=prompt(j[0], (50 + 25 * (len(j[0]) % 3)) // (3 if TSAN_LIGHT else 1),
                                              f" Question {j[1]}:"),
                max_tokens=4, temperature=0), jobs))

    def test_subscriber_view_matches_the_tree(self):
        # Under ThreadSanitizer each prompt once (still more than the pool holds).
        repeats = 1 if TSAN_LIGHT else 3
        a = KvEventSubscriber(self.pub, self.replay)
        try:
            self.run_load(["alpha", "beta", "gamma"], repeats, seed=1)
            self.assertTrue(self.matches_tree(a))
            self.assertGreater(a.stored, 0)
            # A subscriber started now catches up through the replay socket.
            b = KvEventSubscriber(self.pub, self.replay)
            self.assertTrue(self.matches_tree(b))
            a.close()
            # More prompts than the pool holds: the oldest prefixes are evicted.
            self.run_load(["delta", "epsilon", "zeta", "eta"], min(2, repeats), seed=2)
            self.assertTrue(self.matches_tree(b))
            self.assertGreater(b.removed, 0, "the workload evicted nothing")
            # A restarted subscriber (same endpoints, fresh state) rebuilds the same view.
            c = KvEventSubscriber(self.pub, self.replay)
            self.assertTrue(self.matches_tree(c))
            self.assertEqual(set(c.snapshot()), set(b.snapshot()))
            # Flushed while idle: nothing is held, and the events say so.
            self.assertEqual(raw(self.server.url, "POST", "/flush_cache", "")[0], 200)
            self.assertTrue(self.matches_tree(b))
            self.assertEqual(b.snapshot(), {})
            self.assertEqual(self.tree_blocks(), set())
            for s in (a, b, c):
                self.assertEqual(s.errors, [])
            self.assertEqual(b.cleared, 1)  # the start-up AllBlocksCleared, replayed
            b.close()
            c.close()
        finally:
            for s in (a,):
                if not s.stopping:
                    s.close()

    def test_replay_protocol(self):
        """vLLM's replay exchange, byte for byte: [start seq] in, then
        [seq, payload] per kept batch and [-1, empty] at the end."""
        ctx = zmq.Context()
        sock = ctx.socket(zmq.DEALER)
        sock.connect(self.replay)
        try:
            sock.send_multipart([b"", (0).to_bytes(8, "big")])
            seqs = []
            while sock.poll(5000):
                empty, seq8, payload = sock.recv_multipart()
                self.assertEqual(empty, b"")
                seq = int.from_bytes(seq8, "big", signed=True)
                seqs.append(seq)
                if seq == -1:
                    self.assertEqual(payload, b"")
                    break
            self.assertEqual(seqs[-1], -1)
            self.assertEqual(seqs[:-1], list(range(len(seqs) - 1)))
            self.assertGreaterEqual(len(seqs), 2)  # at least the start-up batch
            # The start is unsigned: 2^63 and beyond replay nothing (read signed, they replayed everything).
            for start in (2 ** 63, 2 ** 64 - 1, len(seqs) - 1):
                sock.send_multipart([b"", start.to_bytes(8, "big")])
                self.assertTrue(sock.poll(5000))
                empty, seq8, payload = sock.recv_multipart()
                self.assertEqual(int.from_bytes(seq8, "big", signed=True), -1, start)
        finally:
            sock.close(linger=0)
            ctx.term()


if __name__ == "__main__":
    ServedTest.binary, ServedTest.model = sys.argv[1], sys.argv[2]
    unittest.main(argv=sys.argv[:1], verbosity=2)
