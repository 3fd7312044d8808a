#!/usr/bin/env python3
"""A Prompt Cache schema registered while the server answers chats: how long
the registration takes and how long 4-token chats sent meanwhile wait (issue
23, item 11). Starts its own server on loopback and stops it.

    bench/load/schema_beside_chats.py build/chunkserve models/SmolLM2-135M-Instruct.Q4_1.gguf [--words 1700]
"""
import argparse
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "server"))
from harness import Server, raw  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("model")
    ap.add_argument("--words", type=int, default=1700, help="schema words (1700: about 7400 tokens)")
    ap.add_argument("--chats", type=int, default=3, help="chats sent one after another during the encoding")
    ap.add_argument("--delay", type=float, default=2.0, help="seconds after the registration starts")
    ap.add_argument("server_args", nargs="*", help="more serve options (after --)")
    a = ap.parse_args()
    s = Server(a.binary, a.model, "--kv-memory", "1G", *a.server_args)
    try:
        words = " ".join(f"word{i}" for i in range(a.words))
        out = {}

        def register():
            t0 = time.monotonic()
            out["reply"] = raw(s.url, "POST", "/v1/schemas", f'<schema name="long"><system>{words}</system></schema>')
            out["seconds"] = time.monotonic() - t0

        t = threading.Thread(target=register)
        t.start()
        time.sleep(a.delay)
        waits = []
        for _ in range(a.chats):
            t0 = time.monotonic()
            code, _, j = raw(s.url, "POST", "/v1/chat/completions", json.dumps(
                {"model": os.path.basename(a.model).removesuffix(".gguf"),
                 "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "temperature": 0}))
            if code != 200:
                raise SystemExit(f"chat failed: {code} {j}")
            waits.append(time.monotonic() - t0)
        t.join()
        code, _, j = out["reply"]
        if code != 200:
            raise SystemExit(f"registration failed: {code} {j}")
        print(f"schema: {j['tokens']} tokens stored, registered in {out['seconds']:.1f} s; "
              f"4-token chats sent {a.delay:g} s in: " + ", ".join(f"{w:.2f}" for w in waits) + " s")
    finally:
        s.stop()


if __name__ == "__main__":
    main()
