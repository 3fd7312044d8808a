#!/usr/bin/env python3
"""How much of a multi-turn chat's previous context the next request can take
from the prefix cache, per chat template.

A 4-turn chat (a system message, then user / assistant turns whose replies
carry a <think> section) is rendered turn by turn with our renderer
(jinja_tool). Turn k's context is its prompt plus the reply the model gave;
turn k+1's prompt reuses the longest common token prefix. A template that
rewrites earlier turns (drops reasoning, moves the system message, stamps a
date per turn) reuses less. Tokens are the given GGUF vocabulary's (the
default model's: other templates' special markers split into several
tokens there, which changes counts, not the prefix structure).

    prefix_reuse.py JINJA_TOOL MODEL.gguf TEMPLATE_DIR [--markdown]
"""
import argparse
import json
import os
import subprocess
import sys

SYSTEM = "You are a careful assistant. Answer briefly."
TURNS = [("What is 2+2?", "<think>Two plus two.</think>2+2 is 4."),
         ("And times 3?", "<think>Four times three.</think>That makes 12."),
         ("Minus 5?", "<think>Twelve minus five.</think>That gives 7."),
         ("Is 7 prime?", "<think>Divisors of 7.</think>Yes, 7 is prime.")]


def conversation(k, with_reply):
    msgs = [{"role": "system", "content": SYSTEM}]
    for i in range(k):
        msgs.append({"role": "user", "content": TURNS[i][0]})
        if i < k - 1 or with_reply:
            msgs.append({"role": "assistant", "content": TURNS[i][1]})
    return msgs


def common(a, b):
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tool")
    ap.add_argument("model")
    ap.add_argument("dir")
    a = ap.parse_args()
    templates = {n[:-6]: open(os.path.join(a.dir, n), encoding="utf-8").read()
                 for n in sorted(os.listdir(a.dir)) if n.endswith(".jinja")}
    cases = []
    for name in templates:
        for k in range(1, 5):
            cases.append({"template": name, "vars": {"messages": conversation(k, False), "add_generation_prompt": True,
                                                     "bos_token": "<s>", "eos_token": "</s>", "tools": None}})
    req = {"templates": templates, "now": 1721952000, "tokenizer": a.model, "cases": cases}
    got = json.loads(subprocess.run([a.tool], input=json.dumps(req), capture_output=True, text=True,
                                    check=True).stdout)
    print("| template | reused / previous prompt tokens, turns 1-3 | reuse | earlier turns kept as text |")
    print("|---|---|---|---|")
    rewriting, failed, boundary = [], [], []
    for i, name in enumerate(templates):
        rs = got[4 * i:4 * i + 4]
        if not all(r["ok"] for r in rs):
            failed.append(name)
            continue
        total = reused = 0
        cells = []
        kept = all(rs[k + 1]["text"].startswith(rs[k]["text"]) for k in range(3))
        for k in range(3):
            prompt, nxt = rs[k]["ids"], rs[k + 1]["ids"]
            n = common(prompt, nxt)
            total += len(prompt)
            reused += n
            cells.append(f"{n}/{len(prompt)}")
        pct = 100.0 * reused / max(1, total)
        if not kept:
            rewriting.append((name, pct))
        elif reused < total:
            boundary.append(name)
        print(f"| {name} | {' · '.join(cells)} | {pct:.0f}% | {'yes' if kept else '**no**'} |")
    ok = len(templates) - len(failed)
    print()
    print(f"{ok - len(rewriting)} of {ok} templates keep every earlier turn as text: the next prompt begins with the "
          f"previous one ({ok - len(rewriting) - len(boundary)} of them token for token; in {len(boundary)} the "
          f"previous prompt's last token merges with the reply's first when the text is tokenized again).")
    print("Rewriting earlier turns (the next prompt does not begin with the previous one): " +
          ", ".join(f"{n} ({p:.0f}% of tokens reused)" for n, p in rewriting))
    if failed:
        print(f"Not rendered (they refuse this conversation): {', '.join(failed)}")


if __name__ == "__main__":
    main()
