"""The web console in a real browser: headless Chromium (Debian's, through its
chromedriver) driven by selenium opens the page a server on a loopback port
serves, chats through the page, and reads the KV tree view. Assertions are on
the page's DOM; a screenshot is saved for people.

Run by CTest: python3 test_console.py BINARY MODEL SCREENSHOT
"""
import json
import os
import shutil
import sys
import tempfile
import unittest
import urllib.error
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from harness import Server

BINARY = MODEL = SCREENSHOT = None
MODEL_ID = "SmolLM2-135M-Instruct.Q4_1"
# Longer than one 64-token chunk, so a second chat with it shares a full chunk.
SYSTEM = ("You are the assistant of a small bookstore. Answer in one short sentence. The store opens at nine and "
          "closes at six, sells new and used books, orders any title within three days, offers a ten percent "
          "discount to students and teachers, and accepts returns within thirty days with a receipt. Gift cards "
          "never expire.")


def get_json(url):
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


class Console(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # The page shows cached text, and which chunks the disk tier holds too.
        cls.disk = tempfile.mkdtemp(prefix="cs_console_disk_")
        cls.server = Server(BINARY, MODEL, "--tree-text", "--kv-disk", cls.disk)
        opts = webdriver.ChromeOptions()
        for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                  "--window-size=1400,1000"):
            opts.add_argument(a)
        opts.binary_location = "/usr/bin/chromium"
        cls.driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)

    @classmethod
    def tearDownClass(cls):
        cls.driver.quit()
        assert cls.server.stop() == 0
        shutil.rmtree(cls.disk, ignore_errors=True)

    def chat(self, text, answers_before):
        d = self.driver
        box = d.find_element(By.ID, "prompt")
        box.clear()
        box.send_keys(text)
        d.find_element(By.ID, "send").click()
        WebDriverWait(d, 180).until(
            lambda d: len(d.find_elements(By.CSS_SELECTOR, "#messages .msg.assistant .usage")) > answers_before)
        answers = d.find_elements(By.CSS_SELECTOR, "#messages .msg.assistant")
        self.assertEqual(d.find_elements(By.CSS_SELECTOR, "#messages .msg.error"), [])
        return answers[-1]

    def test_chat_and_shared_tree(self):
        d = self.driver
        d.get(self.server.url + "/")
        WebDriverWait(d, 30).until(lambda d: d.find_element(By.ID, "model").text == MODEL_ID)
        system = d.find_element(By.ID, "system")
        system.clear()
        system.send_keys(SYSTEM)
        d.find_element(By.ID, "temperature").clear()
        d.find_element(By.ID, "temperature").send_keys("0")
        d.find_element(By.ID, "max-tokens").clear()
        d.find_element(By.ID, "max-tokens").send_keys("24")

        first = self.chat("When do you open?", 0)
        self.assertTrue(first.find_element(By.CLASS_NAME, "content").text.strip())
        usage = first.find_element(By.CLASS_NAME, "usage")
        self.assertGreater(int(usage.get_attribute("data-prompt")), 64)
        self.assertGreater(int(usage.get_attribute("data-generated")), 0)
        self.assertRegex(usage.text, r"prompt \d+ · cached \d+ · generated \d+ · TTFT [0-9.]+ s · [0-9.]+ tokens/s")

        # A new chat with the same system prompt: its prompt is served from
        # the cache, and the tree shows the system prompt's chunk used twice.
        d.find_element(By.ID, "new-chat").click()
        second = self.chat("Do you sell used books?", 0)
        cached = int(second.find_element(By.CLASS_NAME, "usage").get_attribute("data-cached"))
        self.assertGreaterEqual(cached, 64)

        # The tree is drawn anew at each poll, so an element found once may be
        # gone by the next read: the first shared node is read whole in one
        # script (a StaleElementReferenceException failed a CI run).
        def shared_root(d):
            return d.execute_script("""
                const n = document.querySelector('#tree li.node.shared');
                if (!n) return null;
                const box = n.querySelector('.box');
                return {uses: Number(n.getAttribute('data-uses')), tokens: Number(n.getAttribute('data-tokens')),
                        state: n.getAttribute('data-state'), title: box ? box.getAttribute('title') || '' : '',
                        on_disk: Number(n.getAttribute('data-on-disk') || 0),
                        disk_mark: n.querySelector('.box > .disk-mark') !== null};""")
        root = WebDriverWait(d, 15).until(shared_root)
        self.assertGreaterEqual(root["uses"], 2, root)
        self.assertGreaterEqual(root["tokens"], 64, root)
        self.assertIn(root["state"], ("cached", "live"))
        self.assertIn("bookstore", root["title"])
        # A second reader had the shared prefix written to the disk tier: marked.
        marked = WebDriverWait(d, 15).until(lambda d: (r := shared_root(d)) and r["on_disk"] >= 1 and r)
        self.assertTrue(marked["disk_mark"], marked)
        self.assertRegex(d.find_element(By.ID, "disk").text, r"^\d+ chunks? · [0-9.]+ MiB$")
        hit = d.find_element(By.ID, "cache-hit").text
        self.assertRegex(hit, r"^\d+%$")
        self.assertGreater(int(hit[:-1]), 0)
        # The page keeps polling: two more polls come (once a second when the
        # machine is idle; waited for, not timed, as a loaded CI host is slower).
        count = lambda d: int(d.find_element(By.TAG_NAME, "body").get_attribute("data-polls"))
        polls = count(d)
        WebDriverWait(d, 30).until(lambda d: count(d) >= polls + 2)
        os.makedirs(os.path.dirname(os.path.abspath(SCREENSHOT)), exist_ok=True)
        self.assertTrue(d.save_screenshot(SCREENSHOT))

    def test_tree_route(self):
        # The JSON the page draws, useful without it (a prefix-aware router).
        status, j = get_json(self.server.url + "/v1/kv/tree?max_nodes=1&text=0")
        self.assertEqual(status, 200, j)
        self.assertEqual(j["object"], "kv.tree")
        self.assertEqual(j["chunk_size"], 64)
        self.assertLessEqual(len(j["nodes"]), 1)
        self.assertEqual(set(j["kv"]), {"chunks", "used", "cached", "pinned", "free", "chunk_bytes", "bytes"})
        self.assertEqual(set(j["sharing"]), {"live_sequences", "held_bytes", "unshared_bytes"})
        status, j = get_json(self.server.url + "/v1/kv/tree?max_nodes=many")
        self.assertEqual(status, 400)
        self.assertEqual(j["error"]["param"], "max_nodes")
        self.assertIn("max_nodes=many: expected an integer in [1, 512]", j["error"]["message"])


if __name__ == "__main__":
    BINARY, MODEL, SCREENSHOT = sys.argv[1], sys.argv[2], sys.argv[3]
    unittest.main(argv=[sys.argv[0], "-v"] + sys.argv[4:])
