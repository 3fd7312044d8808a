#!/usr/bin/env python3
"""Speculative decoding from text the server holds (issue 44), batch 1: decode
tokens/s of `chunkserve generate --chat` with --speculate off and auto, in
alternating rounds, on four tasks whose prompts are below:

  a  answer by quoting a passage of a ~2K-token document
  b  rewrite a 60-line function with one change, without and with the
     original as --prediction (OpenAI's Predicted Outputs)
  c  the tenth tool call of an agent loop whose earlier calls share the JSON shape
  d  free chat

Each round runs every (task, setting) once; the table gives the median
tokens/s, the ratio auto/off of the medians, the drafts taken, and whether the
tokens were the same (they must be: speculation changes speed, never tokens).

With --llama DIR (llama.cpp's build/bin, from bench/peers/build_llama_cpp.sh),
the same rounds also run llama.cpp's prompt-lookup
speculation, `llama-lookup` with its default draft length against
`--spec-draft-n-max 0` (the same program without drafts), on the prompt as SmolLM2's
chat template renders it (ChatML with its default system line), and the table
gets its decode tokens/s and ratio.

    bench/speculation.py [--binary build/chunkserve] [--model FILE] [--rounds 3]
                         [--threads 2] [--max-tokens 160] [--llama DIR] [--json OUT]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def document():
    """~2K tokens of a plain policy document with numbered sections."""
    topics = ["returns", "shipping", "warranty", "privacy", "payments", "accounts", "support", "recalls",
              "gift cards", "subscriptions", "repairs", "trade-ins"]
    out = ["ACME Corporation Customer Policy Handbook\n"]
    for i, t in enumerate(topics, 1):
        out.append(f"Section {i}: {t.title()}\n")
        out.append(f"{i}.1 Customers may contact ACME about {t} by phone, by mail or through the online portal. "
                   f"Every request about {t} is answered within five business days of its arrival.\n")
        out.append(f"{i}.2 Requests about {t} must include the order number, the date of purchase and the name on "
                   f"the account. Requests without these details are returned to the customer unprocessed.\n")
        out.append(f"{i}.3 ACME keeps records of {t} requests for seven years, after which they are deleted "
                   f"unless a law requires them to be kept longer.\n\n")
    return "".join(out)


FUNCTION = "\n".join([
    "def summarize_orders(orders, tax_rate, discounts):",
    '    """Totals a list of orders with tax and discounts applied."""',
    "    total = 0.0",
    "    count = 0",
    "    skipped = []",
    "    for order in orders:",
    "        if order is None:",
    "            continue",
    "        if order.get('status') == 'cancelled':",
    "            skipped.append(order['id'])",
    "            continue",
    "        amount = 0.0",
    "        for item in order['items']:",
    "            price = item['price']",
    "            quantity = item['quantity']",
    "            amount += price * quantity",
    "        code = order.get('discount_code')",
    "        if code in discounts:",
    "            amount -= amount * discounts[code]",
    "        amount += amount * tax_rate",
    "        total += amount",
    "        count += 1",
    "    average = total / count if count else 0.0",
    "    report = {",
    "        'total': round(total, 2),",
    "        'count': count,",
    "        'average': round(average, 2),",
    "        'skipped': skipped,",
    "    }",
    "    return report",
    "",
    "",
    "def format_report(report):",
    '    """One line per field of a summary report."""',
    "    lines = []",
    "    lines.append('Orders: ' + str(report['count']))",
    "    lines.append('Total: ' + str(report['total']))",
    "    lines.append('Average: ' + str(report['average']))",
    "    if report['skipped']:",
    "        lines.append('Skipped: ' + ', '.join(report['skipped']))",
    "    return '\\n'.join(lines)",
    "",
    "",
    "def load_orders(path):",
    '    """Reads orders from a JSON lines file."""',
    "    import json",
    "    orders = []",
    "    with open(path) as f:",
    "        for line in f:",
    "            line = line.strip()",
    "            if not line:",
    "                continue",
    "            orders.append(json.loads(line))",
    "    return orders",
    "",
    "",
    "def main(path):",
    "    orders = load_orders(path)",
    "    report = summarize_orders(orders, 0.08, {'SAVE10': 0.1})",
    "    print(format_report(report))",
])

TOOL_CALLS = [("get_weather", {"city": c, "unit": "celsius"}) for c in
              ["Oslo", "Paris", "Madrid", "Rome", "Berlin", "Vienna", "Prague", "Lisbon", "Dublin"]]


def tasks():
    doc = document()
    calls = "\n".join(json.dumps({"name": n, "arguments": a}) for n, a in TOOL_CALLS)
    return {
        "a": (doc + "\nQuote Section 7 of the handbook above word for word, with nothing else.", None),
        "b": ("Here is a Python module:\n\n" + FUNCTION +
              "\n\nRewrite the module with the variable 'total' renamed to 'grand_total'. Output only the code.", None),
        "b+prediction": ("Here is a Python module:\n\n" + FUNCTION +
                         "\n\nRewrite the module with the variable 'total' renamed to 'grand_total'. Output only the code.",
                         FUNCTION),
        "c": ("You are an agent that calls tools by writing one JSON object per line, like the calls so far:\n" + calls +
              "\nWrite the next call, for Warsaw, in the same format.", None),
        "d": ("Write a short poem about autumn leaves.", None),
    }


def run(binary, model, prompt, prediction, speculate, threads, max_tokens):
    cmd = [binary, "generate", "--chat", "-p", prompt, "-n", str(max_tokens), "--temp", "0", "--threads", str(threads),
           "--speculate", speculate]
    if model:
        cmd += ["-m", model]
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        if prediction is not None:
            f.write(prediction)
            cmd += ["--prediction", f.name]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, errors="surrogateescape", timeout=600)
    finally:
        os.unlink(f.name)
    if p.returncode != 0:
        sys.exit(f"speculation.py: {' '.join(cmd[:3])} failed:\n{p.stderr[-2000:]}")
    m = re.search(r"decode: (\d+) tokens, ([\d.]+) tokens/s", p.stderr)
    d = re.search(r"speculative decoding: (\d+) draft tokens run, (\d+) taken", p.stderr)
    return {"tokens": int(m.group(1)), "tps": float(m.group(2)), "text": p.stdout,
            "drafted": int(d.group(1)) if d else 0, "taken": int(d.group(2)) if d else 0}


SMOLLM2_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


def chatml(user):
    return (f"<|im_start|>system\n{SMOLLM2_SYSTEM}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n"
            "<|im_start|>assistant\n")


def run_llama(bindir, model, prompt, draft, threads, max_tokens):
    cmd = [os.path.join(bindir, "llama-lookup"), "-m", model, "-p", chatml(prompt), "-n", str(max_tokens),
           "--temp", "0", "-t", str(threads), "-c", "4096"]
    if draft is not None:
        cmd += ["--spec-draft-n-max", str(draft)]
    env = {**os.environ, "LD_LIBRARY_PATH": bindir}
    p = subprocess.run(cmd, capture_output=True, text=True, errors="surrogateescape", timeout=600, env=env)
    m = re.search(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds, speed:\s+([\d.]+) t/s", p.stderr)
    if p.returncode != 0 or not m:
        sys.exit(f"speculation.py: llama-lookup failed:\n{p.stderr[-2000:]}")
    acc = re.search(r"n_accept\s+=\s+(\d+)", p.stderr)
    dra = re.search(r"n_drafted\s+=\s+(\d+)", p.stderr)
    return {"tokens": int(m.group(1)), "tps": float(m.group(3)), "text": p.stdout,
            "drafted": int(dra.group(1)) if dra else 0, "taken": int(acc.group(1)) if acc else 0}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "chunkserve"))
    ap.add_argument("--model", default="")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=160)
    ap.add_argument("--tasks", default="a,b,b+prediction,c,d")
    ap.add_argument("--json", default="")
    ap.add_argument("--llama", default="", help="llama.cpp's build/bin (llama-lookup)")
    a = ap.parse_args()
    all_tasks = tasks()
    names = a.tasks.split(",")
    res = {(t, s): [] for t in names for s in ("off", "auto", "llama-off", "llama-lookup")}
    model = a.model or os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
    for r in range(a.rounds):
        for t in names:
            prompt, prediction = all_tasks[t]
            for s in (("off", "auto") if r % 2 == 0 else ("auto", "off")):
                res[(t, s)].append(run(a.binary, a.model, prompt, prediction, s, a.threads, a.max_tokens))
            if a.llama and prediction is None:
                for s in (("llama-off", "llama-lookup") if r % 2 == 0 else ("llama-lookup", "llama-off")):
                    res[(t, s)].append(run_llama(a.llama, model, prompt, 0 if s == "llama-off" else None, a.threads,
                                                 a.max_tokens))
    print(f"\n| task | tokens | off tok/s | auto tok/s | auto/off | drafts taken | same tokens |"
          + (" llama.cpp off | llama-lookup | lookup/off | its drafts taken |" if a.llama else ""))
    print("|---|---|---|---|---|---|---|" + ("---|---|---|---|" if a.llama else ""))
    rows = []
    for t in names:
        off = [x["tps"] for x in res[(t, "off")]]
        on = [x["tps"] for x in res[(t, "auto")]]
        same = all(x["text"] == res[(t, "off")][0]["text"] for x in res[(t, "off")] + res[(t, "auto")])
        drafted = res[(t, "auto")][0]["drafted"]
        taken = res[(t, "auto")][0]["taken"]
        ratio = statistics.median(on) / statistics.median(off)
        row = {"task": t, "tokens": res[(t, "off")][0]["tokens"], "off_tps": off, "auto_tps": on,
               "ratio": ratio, "drafted": drafted, "taken": taken, "same": same}
        line = (f"| {t} | {res[(t, 'off')][0]['tokens']} | {statistics.median(off):.1f} | {statistics.median(on):.1f} | "
                f"{ratio:.2f}x | {taken}/{drafted} | {'yes' if same else 'NO'} |")
        if a.llama:
            lo = [x["tps"] for x in res[(t, "llama-off")]]
            ll = [x["tps"] for x in res[(t, "llama-lookup")]]
            if lo:
                lr = statistics.median(ll) / statistics.median(lo)
                row.update({"llama_off_tps": lo, "llama_lookup_tps": ll, "llama_ratio": lr})
                ld = res[(t, "llama-lookup")][0]
                line += f" {statistics.median(lo):.1f} | {statistics.median(ll):.1f} | {lr:.2f}x | {ld['taken']}/{ld['drafted']} |"
            else:
                line += " - | - | - | - |"
        rows.append(row)
        print(line)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    if not all(r["same"] for r in rows):
        sys.exit("speculation.py: the tokens differ with speculation on")


if __name__ == "__main__":
    main()
