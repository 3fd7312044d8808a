"""The disk tier (serve --kv-disk): a restarted server serves a known system
prompt from disk with the same greedy tokens; a kill -9 while chunks are being
written loses nothing committed and serves nothing partial; damaged files are
found, counted, removed and recomputed; a directory that cannot be written
leaves serving as it was. Bounded: small pools, short answers.

Run by CTest: python3 test_disk.py BINARY MODEL
"""
import os
import re
import resource
import shutil
import signal
import sys
import tempfile
import threading
import time
import unittest

import openai

from harness import Server, raw, wait_until

CHUNK = 64


# 29 rules: 488 tokens, 7 full chunks and 40 tokens, so a prompt and its 8
# answer tokens fill no further chunk (test_restart counts the chunks).
def system_prompt(topic, rules=29):
    return f"You are the assistant for {topic}. " + " ".join(
        f"Rule {i}: answer questions about {topic} item {i} briefly and exactly." for i in range(rules))


PROMPTS = [system_prompt(t) + " Question: what is rule 3?" for t in ("ships", "trains", "maps", "clocks", "bees", "tea")]


def complete(url, prompt, max_tokens=8):
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
    r = client.completions.create(model="SmolLM2-135M-Instruct.Q4_1", prompt=prompt, max_tokens=max_tokens, temperature=0,
                                  extra_body={"ignore_eos": True})
    details = r.usage.prompt_tokens_details
    return r.choices[0].text, r.usage.prompt_tokens, details.cached_tokens, details.model_extra["cached_tokens_disk"]


def metric(url, name, labels=""):
    _, _, text = raw(url, "GET", "/metrics")
    m = re.search(r"^chunkserve:" + re.escape(name) + r"\{[^}]*" + re.escape(labels) + r"[^}]*\} (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


class DiskTier(unittest.TestCase):
    binary = model = None

    @classmethod
    def setUpClass(cls):
        # The reference: each prompt on a server without the tier.
        plain = Server(cls.binary, cls.model, "--kv-memory", "64M")
        try:
            cls.ref = [complete(plain.url, p)[0] for p in PROMPTS]
        finally:
            plain.stop()

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="cs_kvdisk_")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def serve(self, *args, memory="64M"):
        return Server(self.binary, self.model, "--kv-disk", self.dir, "--kv-memory", memory, *args)

    def files(self, suffix):
        out = []
        for root, _, names in os.walk(self.dir):
            out += [os.path.join(root, n) for n in names if n.endswith(suffix)]
        return out

    def test_restart_serves_a_known_prompt_from_disk(self):
        s = self.serve()
        text, n, cached, disk = complete(s.url, PROMPTS[0])
        self.assertEqual((text, cached, disk), (self.ref[0], 0, 0))
        self.assertEqual(s.stop(), 0)
        full = (n - 1) // CHUNK * CHUNK
        self.assertGreaterEqual(len(self.files(".kv")), full // CHUNK)
        s = self.serve()
        try:
            text, n2, cached, disk = complete(s.url, PROMPTS[0])
            self.assertEqual(text, self.ref[0])
            self.assertEqual((n2, cached, disk), (n, full, full))
            self.assertEqual(metric(s.url, "kv_tier_hit_tokens_total", 'tier="disk"'), full)
            self.assertEqual(metric(s.url, "kv_tier_hit_tokens_total", 'tier="pool"'), 0)
            self.assertGreater(metric(s.url, "kv_disk_bytes_read_total"), 0)
            self.assertEqual(metric(s.url, "kv_disk_bad_files_total"), 0)
            # Again: now from the pool (the partial last chunk too).
            text, _, cached, disk = complete(s.url, PROMPTS[0])
            self.assertEqual((text, cached, disk), (self.ref[0], n - 1, 0))
            code, _, tree = raw(s.url, "GET", "/v1/kv/tree")
            self.assertEqual(code, 200)
            self.assertGreaterEqual(tree["disk"]["files"], full // CHUNK)
            self.assertGreater(tree["disk"]["bytes"], 0)
            self.assertTrue(tree["disk"]["writable"])
            self.assertEqual(tree["requests"]["prompt_tokens_disk"], full)
            self.assertEqual(sum(node["on_disk"] for node in tree["nodes"]), full // CHUNK)
        finally:
            self.assertEqual(s.stop(), 0)

    def test_evicted_prompts_come_back_from_disk(self):
        # 12 MiB: 8 chunks of SmolLM2's 1.5 MB, about one prompt (488 tokens).
        s = self.serve(memory="12M")
        try:
            for i, p in enumerate(PROMPTS):
                self.assertEqual(complete(s.url, p)[0], self.ref[i])
            got = [complete(s.url, p) for p in PROMPTS]
            self.assertEqual([g[0] for g in got], self.ref)
            self.assertGreater(got[0][3], 0)  # the first prompt was evicted, then read back
            self.assertGreater(metric(s.url, "kv_tier_evictions_total", 'tier="pool"'), 0)
            self.assertGreater(metric(s.url, "kv_disk_chunks_written_total"), 0)
            self.assertEqual(metric(s.url, "kv_tier_hit_tokens_total", 'tier="disk"'), sum(g[3] for g in got))
        finally:
            self.assertEqual(s.stop(), 0)

    def test_kill_during_writes_loses_nothing_committed(self):
        s = self.serve(memory="12M")
        stop = threading.Event()
        errors = []

        def load(k):
            i = k
            while not stop.is_set() and i < k + 12:  # bounded
                try:
                    complete(s.url, PROMPTS[i % len(PROMPTS)], max_tokens=2)
                except Exception as e:  # the kill cuts requests: expected
                    errors.append(e)
                    return
                i += 1

        threads = [threading.Thread(target=load, args=(k,)) for k in range(3)]
        for t in threads:
            t.start()
        try:
            self.assertTrue(wait_until(lambda: (metric(s.url, "kv_disk_chunks_written_total") or 0) >= 8, 300))
        finally:
            s.stop(signal.SIGKILL)
            stop.set()
            for t in threads:
                t.join(60)
        committed = set(self.files(".kv"))
        self.assertGreaterEqual(len(committed), 8)
        s = self.serve()
        try:
            # Start-up removed what the kill left half-written, kept every committed file.
            self.assertEqual(self.files(".tmp"), [])
            self.assertEqual(set(self.files(".kv")), committed)
            for i, p in enumerate(PROMPTS):
                self.assertEqual(complete(s.url, p)[0], self.ref[i], f"prompt {i}")
            self.assertGreater(metric(s.url, "kv_tier_hit_tokens_total", 'tier="disk"'), 0)
            # A committed file is whole: none was found damaged when read.
            self.assertFalse(any("is damaged" in l for l in s.log))
        finally:
            self.assertEqual(s.stop(), 0)

    def test_damaged_files_are_recomputed_not_served(self):
        s = self.serve()
        for p in PROMPTS[:2]:
            complete(s.url, p)
        self.assertEqual(s.stop(), 0)
        files = self.files(".kv")
        self.assertGreater(len(files), 10)
        for f in files:
            with open(f, "r+b") as h:
                h.seek(os.path.getsize(f) // 2)
                b = h.read(1)
                h.seek(-1, 1)
                h.write(bytes([b[0] ^ 0x40]))
        s = self.serve()
        try:
            for i, p in enumerate(PROMPTS[:2]):
                text, _, cached, disk = complete(s.url, p)
                self.assertEqual((text, disk), (self.ref[i], 0))
                self.assertLess(cached, CHUNK)  # the second shares its opening words with the first
            # Each prompt's first chunk was read, found damaged and removed.
            self.assertEqual(metric(s.url, "kv_disk_bad_files_total"), 2)
            self.assertTrue(s.wait_for_log(r"kv-disk: .*\.kv is damaged; removed", 120))
        finally:
            self.assertEqual(s.stop(), 0)
        # Computed again, then written again: the next start serves them from disk.
        s = self.serve()
        try:
            for i, p in enumerate(PROMPTS[:2]):
                text, n, _, disk = complete(s.url, p)
                self.assertEqual((text, disk), (self.ref[i], (n - 1) // CHUNK * CHUNK))
        finally:
            self.assertEqual(s.stop(), 0)

    def test_a_write_that_fails_midway_turns_writing_off(self):
        def small_files():
            # Files of 1 MiB at most: every chunk's write (1.4 MiB) fails
            # part-way, as on a full disk (EFBIG instead of ENOSPC).
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))

        s = Server(self.binary, self.model, "--kv-disk", self.dir, "--kv-memory", "12M", preexec=small_files)
        try:
            for i, p in enumerate(PROMPTS[:3]):
                self.assertEqual(complete(s.url, p)[0], self.ref[i])
            self.assertTrue(s.wait_for_log(r"kv-disk: cannot write .*\.kv: File too large; writing to the disk tier is off", 120))
            self.assertEqual(metric(s.url, "kv_disk_writable"), 0)
            self.assertEqual(metric(s.url, "kv_disk_write_errors_total"), 1)
            self.assertEqual(metric(s.url, "kv_disk_files"), 0)
            self.assertEqual(sum("kv-disk:" in l for l in s.log), 1)
            self.assertEqual(self.files(".kv") + self.files(".tmp"), [])  # the part-written file is gone
        finally:
            self.assertEqual(s.stop(), 0)

    def test_a_directory_it_cannot_write_leaves_serving_as_it_was(self):
        not_a_dir = os.path.join(self.dir, "file")
        open(not_a_dir, "w").close()
        s = Server(self.binary, self.model, "--kv-disk", not_a_dir, "--kv-memory", "12M")
        try:
            self.assertTrue(s.wait_for_log(r"kv-disk: cannot use .*writing to the disk tier is off, serving goes on", 120))
            for i, p in enumerate(PROMPTS[:3]):
                self.assertEqual(complete(s.url, p)[0], self.ref[i])
            self.assertEqual(metric(s.url, "kv_disk_writable"), 0)
            self.assertEqual(metric(s.url, "kv_disk_write_errors_total"), 1)
            self.assertEqual(sum("kv-disk:" in l for l in s.log), 1)  # one line, not one per chunk
        finally:
            self.assertEqual(s.stop(), 0)

    def test_a_link_in_place_of_its_directory_deletes_nothing(self):
        # Start-up followed a symbolic link put in place of DIR/<root>, deleted every file of its target and
        # wrote chunks into it. Now the link is not followed: the target is as it was and serving goes on.
        s = self.serve()
        s.stop()
        (root,) = os.listdir(self.dir)
        victim = tempfile.mkdtemp(prefix="cs_victim_")
        try:
            mine = {"notes.txt": b"notes", "big": os.urandom(2 << 20), "0" * 32 + ".kv": b"mine too"}
            for name, data in mine.items():
                with open(os.path.join(victim, name), "wb") as f:
                    f.write(data)
            shutil.rmtree(os.path.join(self.dir, root))
            os.symlink(victim, os.path.join(self.dir, root))
            s = self.serve(memory="12M")
            try:
                self.assertTrue(s.wait_for_log(r"kv-disk: .* is a symbolic link or not a directory; it is not used", 120))
                for i, p in enumerate(PROMPTS[:3]):
                    self.assertEqual(complete(s.url, p)[0], self.ref[i])
                self.assertEqual(metric(s.url, "kv_disk_writable"), 0)
            finally:
                self.assertEqual(s.stop(), 0)
            self.assertEqual(sorted(os.listdir(victim)), sorted(mine))
            for name, data in mine.items():
                with open(os.path.join(victim, name), "rb") as f:
                    self.assertEqual(f.read(), data, name)
        finally:
            shutil.rmtree(victim, ignore_errors=True)

    def test_two_servers_on_one_directory_keep_one_size(self):
        # Two servers of 12M each on one directory wrote 24M together. Now the first holds the directory;
        # the second serves what it finds there and writes nothing, so the tier stays within one size.
        a = self.serve("--kv-disk-size", "12M", memory="12M")
        try:
            for p in PROMPTS:
                complete(a.url, p)
            wait_until(lambda: metric(a.url, "kv_disk_files") and metric(a.url, "kv_disk_files") > 0, 60)
            b = self.serve("--kv-disk-size", "12M", memory="12M")
            try:
                self.assertTrue(b.wait_for_log(r"kv-disk: .* is another server's \(locked\)", 120))
                for i, p in enumerate(PROMPTS):
                    self.assertEqual(complete(b.url, p)[0], self.ref[i])
                self.assertEqual(metric(b.url, "kv_disk_writable"), 0)
                self.assertGreater(metric(b.url, "kv_disk_chunks_read_total") or 0, 0)
            finally:
                self.assertEqual(b.stop(), 0)
        finally:
            self.assertEqual(a.stop(), 0)
        total = sum(os.path.getsize(f) for f in self.files(".kv"))
        self.assertLessEqual(total, 12 << 20)


if __name__ == "__main__":
    DiskTier.binary, DiskTier.model = sys.argv[1], sys.argv[2]
    unittest.main(argv=sys.argv[:1], verbosity=2)
