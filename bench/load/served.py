"""A chunkserve server of the load scripts' own: started on a free loopback
port, waited for (/health), its model's id read, stopped at the end.

    with Served(binary, model) as s:
        s.chat({...})  # the chat route's JSON answer
        for seconds, chunk in s.stream_chat({...}): ...
"""
import json
import socket
import subprocess
import time
import urllib.error
import urllib.request


class Served:
    def __init__(self, binary, model, *args):
        self.binary = binary
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        self.proc = subprocess.Popen([binary, "serve", "--model", model, "--host", "127.0.0.1", "--port", str(port),
                                      *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.url = f"http://127.0.0.1:{port}"
        try:
            for _ in range(300):
                try:
                    urllib.request.urlopen(self.url + "/health", timeout=2)
                    break
                except (urllib.error.URLError, ConnectionError):
                    time.sleep(0.2)
            self.model = json.load(urllib.request.urlopen(self.url + "/v1/models"))["data"][0]["id"]
        except BaseException:
            self.stop()
            raise

    def chat(self, body):
        """POST /v1/chat/completions with `body` (its model set); the answer's JSON."""
        req = urllib.request.Request(self.url + "/v1/chat/completions", json.dumps({"model": self.model, **body}).encode(),
                                     {"Content-Type": "application/json"})
        return json.load(urllib.request.urlopen(req, timeout=600))

    def stream_chat(self, body):
        """POST /v1/chat/completions with `body` and stream: true; yields
        (seconds since the request was sent, chunk) for each data chunk."""
        req = urllib.request.Request(self.url + "/v1/chat/completions",
                                     json.dumps({"model": self.model, **body, "stream": True}).encode(),
                                     {"Content-Type": "application/json"})
        start = time.perf_counter()
        with urllib.request.urlopen(req, timeout=600) as r:
            for line in r:
                line = line.decode().strip()
                if line.startswith("data: ") and line != "data: [DONE]":
                    yield time.perf_counter() - start, json.loads(line[6:])

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
