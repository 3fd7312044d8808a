#!/usr/bin/env python3
"""Renders every chat template of the llama-cpp-python sdist (and any more
given) with our renderer (jinja_tool) and with Python's jinja2 configured as
Hugging Face's apply_chat_template configures it, on a fixed set of
conversations, and compares the outputs byte for byte.

    check_templates.py JINJA_TOOL TEMPLATE_DIR... [--gguf MODEL.gguf]... [--known FILE] [--report]

--gguf adds the chat template a model file carries (tokenizer.chat_template,
read with PyPI's gguf), named after the file.

Passes when (1) at least 90% of the (template, conversation) pairs are
byte-identical or refused by both, (2) every pair that differs is listed in
the known-differences file with its reason, and (3) no listed pair has
started to agree (the list stays true)."""
import argparse
import datetime
import json
import os
import subprocess
import sys

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))


class AssistantTracker(Extension):
    """HF's {% generation %} block: renders its body in place."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def hf_environment(now):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.datetime.fromtimestamp(now).strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def cases(templates, convs):
    """(template name, conversation name, vars) for each pair that applies:
    the tool conversations only for templates that read `tools`."""
    out = []
    for name, src in sorted(templates.items()):
        for c in convs["conversations"]:
            if c.get("tools") and "tools" not in src:
                continue
            v = {"messages": c["messages"], "add_generation_prompt": c["add_generation_prompt"],
                 "bos_token": convs["bos_token"], "eos_token": convs["eos_token"],
                 "tools": convs["tools"] if c.get("tools") else None, "documents": None}
            out.append((name, c["name"], v))
    return out


def reference(env, src, v):
    try:
        return True, env.from_string(src).render(**v)
    except Exception as e:  # noqa: BLE001 - any refusal counts as one
        return False, f"{type(e).__name__}: {e}"


def load_known(path):
    known = {}
    if not path or not os.path.exists(path):
        return known
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            key, _, reason = line.partition(" ")
            known[key] = reason.strip()
    return known


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tool")
    ap.add_argument("dirs", nargs="+")
    ap.add_argument("--gguf", action="append", default=[], help="a model file whose template to check too")
    ap.add_argument("--known", default=os.path.join(HERE, "known_differences.txt"))
    ap.add_argument("--report", action="store_true", help="print every differing pair in full")
    a = ap.parse_args()
    with open(os.path.join(HERE, "conversations.json")) as f:
        convs = json.load(f)
    templates = {}
    for d in a.dirs:
        for n in sorted(os.listdir(d)):
            if n.endswith(".jinja"):
                with open(os.path.join(d, n), encoding="utf-8") as f:
                    templates[n[:-len(".jinja")]] = f.read()
    for path in a.gguf:
        import gguf  # noqa: PLC0415 - only when a model file is named
        f = gguf.GGUFReader(path).fields.get("tokenizer.chat_template")
        if f is None:
            sys.exit(f"check_templates: {path} has no chat template")
        templates["gguf:" + os.path.basename(path)] = bytes(f.parts[f.data[0]]).decode("utf-8")
    if len(templates) < 2:
        sys.exit(f"check_templates: found {len(templates)} templates in {a.dirs}")
    all_cases = cases(templates, convs)
    req = {"templates": templates, "now": convs["now"],
           "cases": [{"template": t, "vars": v} for t, _, v in all_cases]}
    got = json.loads(subprocess.run([a.tool], input=json.dumps(req), capture_output=True, text=True,
                                    check=True).stdout)
    env = hf_environment(convs["now"])
    known = load_known(a.known)
    identical = refused = 0
    differing, unlisted, stale = [], [], []
    for (t, c, v), ours in zip(all_cases, got):
        ok, text = reference(env, templates[t], v)
        key = f"{t}/{c}"
        if ok and ours["ok"] and ours["text"] == text:
            identical += 1
        elif not ok and not ours["ok"]:
            refused += 1
        else:
            differing.append(key)
            if key not in known:
                unlisted.append(key)
            if a.report or key not in known:
                print(f"--- {key}\n  jinja2: {'ok' if ok else 'error'}: {text[:400]!r}\n"
                      f"  ours:   {'ok' if ours['ok'] else 'error'}: "
                      f"{(ours.get('text') or ours.get('error'))[:400]!r}")
            continue
        if key in known:
            stale.append(key)
    n = len(all_cases)
    agree = identical + refused
    print(f"{len(templates)} templates, {n} pairs: {identical} byte-identical, {refused} refused by both, "
          f"{len(differing)} differ ({100.0 * agree / n:.1f}% agree)")
    for k in differing:
        if k in known:
            print(f"  known: {k}: {known[k]}")
    bad = False
    if agree < 0.9 * n:
        print(f"FAIL: {agree}/{n} agree, under 90%")
        bad = True
    if unlisted:
        print(f"FAIL: {len(unlisted)} differing pairs are not in {a.known}: {unlisted}")
        bad = True
    if stale:
        print(f"FAIL: these listed pairs agree now; take them off the list: {stale}")
        bad = True
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
