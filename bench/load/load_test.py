#!/usr/bin/env python3
"""Load test of an OpenAI-compatible server on loopback: N concurrent streaming
clients, requests sharing a long system prompt, a fraction of clients
disconnecting mid-stream at random. Bounded in requests and time; stops by itself.

Checks: every completed stream is well-formed (JSON chunks, one finish_reason per
choice, a usage chunk, [DONE]) and its text equals the non-streamed answer for the
same seed (asked after the load phase); no request is lost (every request that was
not disconnected on purpose completes with 200); the server's RSS after the run is
within 10% of its RSS after warm-up (when this script started it).
Reports requests/s, TTFT p50/p99 (first content chunk, client side) and the cache
hit ratio (cached / prompt tokens from usage), as one JSON line at the end.

  bench/load/load_test.py --server chunkserve            # starts build/chunkserve serve
  bench/load/load_test.py --server llama --requests 96   # starts llama-server (bench/peers)
  bench/load/load_test.py --url http://127.0.0.1:8080 --model NAME
  bench/load/load_test.py --server chunkserve --poll-tree  # with the web console's polling
  bench/load/load_test.py --server chunkserve --system-prompts 16 --kv-memory 126M [--kv-disk DIR]
      # 16 system prompts whose KV is 3x the pool, without and with the disk tier (bench/disk/shared_load.py)
  bench/load/load_test.py --server chunkserve --openai-client --requests 64 --clients 32 --disconnect 0
      # through the official openai client: one client, its pooled keep-alive connections shared by all threads
  bench/load/load_test.py --server chunkserve --api messages --requests 96 --clients 32 --disconnect 0
      # the same load through Anthropic's Messages API (/v1/messages: its events, its usage)
"""
import argparse
import http.client
import json
import os
import random
import re
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL_FILE = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
TOPICS = ["opening hours", "student discounts", "gift cards", "returns", "special orders", "the cafe",
          "author readings", "story time", "used books", "rare editions", "parking", "membership"]


def system_prompt(words=700, seed=42):
    """A ~1000-token system prompt (the same for every request of one seed)."""
    rng = random.Random(seed)
    vocab = ("the store books customers staff policy order shelf author reading event discount card "
             "return receipt week month day open close price new used rare edition cafe coffee tea").split()
    body = " ".join(rng.choice(vocab) for _ in range(words))
    return "You are the assistant of a bookstore. Answer briefly and politely. Store notes: " + body


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))
    except (OSError, AttributeError):
        return None


def start_server(kind, port, parallel, extra=()):
    if kind == "chunkserve":
        cmd = [os.path.join(ROOT, "build", "chunkserve"), "serve", "-m", MODEL_FILE, "--port", str(port),
               "--max-batch", str(parallel), *extra]
        model = "SmolLM2-135M-Instruct.Q4_1"
    else:
        bin_ = os.path.join(ROOT, "bench", "peers", ".work", "llama.cpp", "build", "bin", "llama-server")
        cmd = [bin_, "-m", MODEL_FILE, "--port", str(port), "--parallel", str(parallel), "--cont-batching",
               "--kv-unified", "-c", str(parallel * 1400), "-t", "2", "--log-disable"]
        model = "SmolLM2-135M-Instruct.Q4_1"
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return proc, model
        except OSError:
            pass
        time.sleep(0.3)
    proc.kill()
    sys.exit(f"{kind} did not start")


API = "chat"  # or "messages" (--api)
PATHS = {"chat": "/v1/chat/completions", "messages": "/v1/messages"}


def body(model, sys_prompt, i, stream, max_tokens):
    question = {"role": "user", "content": f"Request {i}: what should I know about {TOPICS[i % len(TOPICS)]}?"}
    b = {"model": model, "max_tokens": max_tokens, "temperature": 0.7, "seed": 1000 + i}
    if API == "messages":  # seed: chunkserve's extension, so the streamed text can be checked
        b.update({"system": sys_prompt, "messages": [question]})
        if stream:
            b["stream"] = True
        return json.dumps(b)
    b["messages"] = [{"role": "system", "content": sys_prompt}, question]
    if stream:
        b["stream"] = True
        b["stream_options"] = {"include_usage": True}
    return json.dumps(b)


def read_messages_stream(r, out, disconnect, t0):
    """A Messages API stream (event:/data: lines) into stream_one's result
    dict; its usage as the chat route's (prompt = input + cache read)."""
    events, done = 0, False
    while True:
        line = r.readline()
        if not line:
            break
        line = line.decode().rstrip("\r\n")
        if not line.startswith("data: "):
            continue
        try:
            j = json.loads(line[6:])
        except ValueError:
            out["problems"].append(f"event is not JSON: {line[:80]!r}")
            continue
        kind = j.get("type")
        if kind == "error":
            out["problems"].append(f"error event: {j['error']}")
        elif kind == "content_block_delta" and j["delta"].get("type") == "text_delta":
            if out["ttft"] is None:
                out["ttft"] = time.time() - t0
            out["text"] += j["delta"]["text"]
        elif kind == "message_delta":
            if out["finish"]:
                out["problems"].append("two message_delta events")
            out["finish"] = j["delta"]["stop_reason"]
            u = j["usage"]
            out["usage"] = {"prompt_tokens": u["input_tokens"] + u["cache_read_input_tokens"],
                            "prompt_tokens_details": {"cached_tokens": u["cache_read_input_tokens"]}}
        elif kind == "message_stop":
            done = True
            break
        events += 1
        if disconnect is not None and events >= disconnect:
            out["disconnected"] = True
            return
    if not done:
        out["problems"].append("stream ended without message_stop")
    if out["finish"] is None:
        out["problems"].append("no stop_reason")


def stream_one(host, port, payload, disconnect_after, timeout):
    """Streams one request. Returns a dict: status, text, ttft, usage, finish, problems, disconnected."""
    out = {"status": None, "text": "", "ttft": None, "usage": None, "finish": None, "problems": [],
           "disconnected": False}
    t0 = time.time()
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("POST", PATHS[API], payload, {"Content-Type": "application/json"})
        r = conn.getresponse()
        out["status"] = r.status
        if r.status != 200:
            out["problems"].append(f"status {r.status}: {r.read()[:200]!r}")
            return out
        if API == "messages":
            read_messages_stream(r, out, disconnect_after, t0)
            if out["disconnected"]:
                conn.sock.close()
            return out
        events, done = 0, False
        while True:
            line = r.readline()
            if not line:
                break
            line = line.decode().rstrip("\r\n")
            if not line or line.startswith(":"):
                continue
            if not line.startswith("data: "):
                out["problems"].append(f"not an SSE data line: {line[:80]!r}")
                continue
            data = line[6:]
            if data == "[DONE]":
                done = True
                break
            try:
                j = json.loads(data)
            except ValueError:
                out["problems"].append(f"chunk is not JSON: {data[:80]!r}")
                continue
            if "error" in j:
                out["problems"].append(f"error chunk: {j['error']}")
                continue
            if j.get("usage"):
                out["usage"] = j["usage"]
            for c in j.get("choices", []):
                piece = (c.get("delta") or {}).get("content") or ""
                if piece and out["ttft"] is None:
                    out["ttft"] = time.time() - t0
                out["text"] += piece
                if c.get("finish_reason"):
                    if out["finish"]:
                        out["problems"].append("two finish reasons")
                    out["finish"] = c["finish_reason"]
            events += 1
            if disconnect_after is not None and events >= disconnect_after:
                out["disconnected"] = True
                conn.sock.close()
                return out
        if not done:
            out["problems"].append("stream ended without [DONE]")
        if out["finish"] is None:
            out["problems"].append("no finish_reason")
        if out["usage"] is None:
            out["problems"].append("no usage chunk")
    except Exception as e:  # a lost request
        out["problems"].append(f"{type(e).__name__}: {e}")
    finally:
        conn.close()
    return out


def stream_openai(client, payload, disconnect_after):
    """stream_one through the official client (its pooled connections); the same result dict."""
    out = {"status": None, "text": "", "ttft": None, "usage": None, "finish": None, "problems": [],
           "disconnected": False}
    t0 = time.time()
    p = json.loads(payload)
    try:
        stream = client.chat.completions.create(**p)
        out["status"] = 200
        events = 0
        for chunk in stream:
            if chunk.usage:
                out["usage"] = chunk.usage.model_dump()
            for c in chunk.choices:
                piece = c.delta.content or ""
                if piece and out["ttft"] is None:
                    out["ttft"] = time.time() - t0
                out["text"] += piece
                if c.finish_reason:
                    if out["finish"]:
                        out["problems"].append("two finish reasons")
                    out["finish"] = c.finish_reason
            events += 1
            if disconnect_after is not None and events >= disconnect_after:
                out["disconnected"] = True
                stream.close()
                return out
        if out["finish"] is None:
            out["problems"].append("no finish_reason")
        if out["usage"] is None:
            out["problems"].append("no usage chunk")
    except Exception as e:  # a lost request (APIConnectionError, ...)
        out["problems"].append(f"{type(e).__name__}: {e} ({e.__cause__!r})")
    return out


def plain_one(host, port, payload, timeout):
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("POST", PATHS[API], payload, {"Content-Type": "application/json"})
        r = conn.getresponse()
        j = json.loads(r.read())
        if r.status != 200:
            return None
        if API == "messages":
            return "".join(b["text"] for b in j["content"] if b["type"] == "text")
        return j["choices"][0]["message"]["content"]
    except Exception:
        return None
    finally:
        conn.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", choices=["chunkserve", "llama"], help="start this server")
    ap.add_argument("--url", help="use a running server instead")
    ap.add_argument("--model", default="SmolLM2-135M-Instruct.Q4_1")
    ap.add_argument("--port", type=int, default=18931)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--parallel", type=int, default=32, help="server sequences at once (max batch / slots)")
    ap.add_argument("--requests", type=int, default=500)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--disconnect", type=float, default=0.10, help="fraction of clients that hang up mid-stream")
    ap.add_argument("--time-limit", type=float, default=1800, help="seconds; requests not started by then are skipped")
    ap.add_argument("--poll-tree", action="store_true",
                    help="also poll GET /v1/kv/tree once a second, as the web console does")
    ap.add_argument("--no-verify", action="store_true", help="skip the non-streamed comparison")
    ap.add_argument("--system-prompts", type=int, default=1,
                    help="distinct system prompts; each request takes one at random (seeded)")
    ap.add_argument("--kv-memory", help="chunkserve's --kv-memory (e.g. 128M)")
    ap.add_argument("--kv-disk", help="chunkserve's --kv-disk DIR (the disk tier)")
    ap.add_argument("--openai-client", action="store_true",
                    help="stream through one official openai client (pooled keep-alive connections, no retries)")
    ap.add_argument("--api", choices=["chat", "messages"], default="chat",
                    help="chat: /v1/chat/completions; messages: Anthropic's /v1/messages (chunkserve)")
    a = ap.parse_args()
    global API
    API = a.api
    if a.openai_client and a.api != "chat":
        sys.exit("--openai-client streams chat completions only")

    proc = None
    if a.server:
        extra = (["--kv-memory", a.kv_memory] if a.kv_memory else []) + (["--kv-disk", a.kv_disk] if a.kv_disk else [])
        proc, model = start_server(a.server, a.port, a.parallel, extra)
        host, port = "127.0.0.1", a.port
    else:
        m = re.match(r"http://([^:/]+):(\d+)", a.url or "")
        if not m:
            sys.exit("give --server or --url http://HOST:PORT")
        host, port, model = m.group(1), int(m.group(2)), a.model
    if host not in ("127.0.0.1", "localhost"):
        sys.exit("loopback only")
    prompts = [system_prompt(seed=42 + k) for k in range(a.system_prompts)]
    pick = random.Random(11)
    which = [pick.randrange(a.system_prompts) for _ in range(a.requests)]
    sys_prompt = prompts[0]
    timeout = 600
    try:
        oai = None
        if a.openai_client:
            import openai  # its default pool keeps up to 100 keep-alive connections
            oai = openai.OpenAI(base_url=f"http://{host}:{port}/v1", api_key="unused", max_retries=0, timeout=timeout)
        # Warm-up: one request, then the RSS baseline.
        stream_one(host, port, body(model, sys_prompt, -1, True, a.max_tokens), None, timeout)
        rss_warm = rss_kib(proc.pid) if proc else None
        rng = random.Random(7)
        plan = [(i, rng.randrange(1, 8) if rng.random() < a.disconnect else None) for i in range(a.requests)]
        results = [None] * a.requests
        nxt = [0]
        lock = threading.Lock()
        start = time.time()

        def client():
            while True:
                with lock:
                    if nxt[0] >= len(plan) or time.time() - start > a.time_limit:
                        return
                    i, cut = plan[nxt[0]]
                    nxt[0] += 1
                payload = body(model, prompts[which[i]], i, True, a.max_tokens)
                results[i] = stream_openai(oai, payload, cut) if oai else stream_one(host, port, payload, cut, timeout)
                done = sum(r is not None for r in results)
                if done % 25 == 0:
                    print(f"\r{done}/{a.requests} done, {time.time() - start:.0f} s", end="", file=sys.stderr)

        polls = []  # (seconds, nodes) of each console poll
        loading = [True]

        def poll_tree():
            # What the web console does with its page open: GET the tree every second.
            while loading[0]:
                t0 = time.time()
                conn = http.client.HTTPConnection(host, port, timeout=timeout)
                conn.request("GET", "/v1/kv/tree?max_nodes=256")
                r = conn.getresponse()
                nodes = len(json.loads(r.read())["nodes"]) if r.status == 200 else -1
                conn.close()
                polls.append((time.time() - t0, nodes))
                time.sleep(max(0.0, 1.0 - (time.time() - t0)))

        threads = [threading.Thread(target=client) for _ in range(a.clients)]
        poller = threading.Thread(target=poll_tree) if a.poll_tree else None
        for t in threads + ([poller] if poller else []):
            t.start()
        for t in threads:
            t.join()
        wall = time.time() - start
        loading[0] = False
        if poller:
            poller.join()
        print(file=sys.stderr)
        time.sleep(1.0)
        rss_after = rss_kib(proc.pid) if proc else None

        ran = [(i, r) for i, r in enumerate(results) if r is not None]
        completed = [(i, r) for i, r in ran if not r["disconnected"]]
        lost = [(i, r["problems"]) for i, r in completed if r["problems"] or r["status"] != 200]
        ttfts = sorted(r["ttft"] for _, r in completed if r["ttft"] is not None)
        prompt = sum(r["usage"]["prompt_tokens"] for _, r in completed if r["usage"])
        cached = sum((r["usage"].get("prompt_tokens_details") or {}).get("cached_tokens", 0) or 0
                     for _, r in completed if r["usage"])
        from_disk = sum((r["usage"].get("prompt_tokens_details") or {}).get("cached_tokens_disk", 0) or 0
                        for _, r in completed if r["usage"])
        mismatched = []
        if not a.no_verify:
            idx = [i for i, r in completed if not r["problems"]]
            answers = {}

            def verify(chunk):
                for i in chunk:
                    answers[i] = plain_one(host, port, body(model, prompts[which[i]], i, False, a.max_tokens), timeout)

            parts = [idx[k::a.clients] for k in range(a.clients)]
            vt = [threading.Thread(target=verify, args=(p,)) for p in parts]
            for t in vt:
                t.start()
            for t in vt:
                t.join()
            mismatched = [i for i in idx if answers.get(i) != results[i]["text"]]
        report = {
            "server": a.server or a.url, "api": a.api, "client": "openai" if oai else "http.client", "clients": a.clients, "requests": len(ran), "completed": len(completed),
            "disconnected": len(ran) - len(completed), "lost": len(lost), "mismatched": len(mismatched),
            "wall_s": round(wall, 2), "requests_per_s": round(len(ran) / wall, 3),
            "ttft_p50_s": round(statistics.median(ttfts), 3) if ttfts else None,
            "ttft_p99_s": round(ttfts[min(len(ttfts) - 1, int(0.99 * len(ttfts)))], 3) if ttfts else None,
            "cache_hit_ratio": round(cached / prompt, 3) if prompt else None,
            "disk_hit_ratio": round(from_disk / prompt, 3) if prompt else None,
            "rss_warm_mib": round(rss_warm / 1024, 1) if rss_warm else None,
            "rss_after_mib": round(rss_after / 1024, 1) if rss_after else None,
        }
        if a.poll_tree:
            lat = sorted(p[0] for p in polls)
            report.update({"tree_polls": len(polls), "tree_failed": sum(p[1] < 0 for p in polls),
                           "tree_poll_p50_ms": round(1000 * statistics.median(lat), 1) if lat else None,
                           "tree_poll_max_ms": round(1000 * lat[-1], 1) if lat else None,
                           "tree_nodes_max": max((p[1] for p in polls), default=0)})
        print(json.dumps(report))
        for i, p in lost[:5]:
            print(f"lost request {i}: {p}", file=sys.stderr)
        ok = not lost and not mismatched
        if rss_warm and rss_after and rss_after > 1.10 * rss_warm:
            print(f"RSS grew from {rss_warm} to {rss_after} KiB", file=sys.stderr)
            ok = False
        return 0 if ok else 1
    finally:
        if proc:
            proc.terminate()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()


if __name__ == "__main__":
    sys.exit(main())
