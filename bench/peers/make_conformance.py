#!/usr/bin/env python3
"""Writes tests/data/conformance.json: llama.cpp's token ids for varied texts and
its greedy continuations of prompts on the default model. The C++ conformance
test checks chunkserve against this file. Run build_llama_cpp.sh first.

llama.cpp is run with an fp32 KV cache and no flash attention so that its
numerics are as close to plain fp32 attention as it gets; its logits are
recorded too, so a flip can be judged as a near-tie.
"""
import json, os, sys, pathlib

here = pathlib.Path(__file__).resolve().parent
work = here / ".work"
os.environ.setdefault("LLAMA_CPP_LIB_PATH", str(work / "llama.cpp" / "build" / "bin"))
sys.path.insert(0, str(work / "llama_cpp_python"))
import llama_cpp  # noqa: E402

root = here.parent.parent
model = sys.argv[1] if len(sys.argv) > 1 else str(root / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf")
# A second argument writes elsewhere (check_quants.sh records other files).
out_path = pathlib.Path(sys.argv[2]) if len(sys.argv) > 2 else root / "tests" / "data" / "conformance.json"

TEXTS = [
    "Hello world",
    " Hello world",
    "  leading and trailing spaces  ",
    "The quick brown fox jumps over the lazy dog.",
    "I'm sure you've seen they'll do it; we'd say she's right, won't we?",
    "Numbers: 1234567890 and 3.14159, 1e-10, -42, 0x1F.",
    "Tabs\tand\nnewlines\n\n\nand\r\nwindows line endings",
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
    "#include <stdio.h>\nint main() { printf(\"%d\\n\", 42); return 0; }",
    "Emoji: 😀🎉👍🏽 and flags 🇫🇷🇯🇵",
    "中文分词测试：我爱北京天安门。",
    "日本語のテキストとカタカナ、ひらがな。",
    "한국어 문장입니다.",
    "Русский текст с ёлкой и Щ.",
    "Ελληνικά: αβγδε ΑΒΓΔΕ",
    "العربية نص قصير",
    "Mixed: café naïve résumé Zürich Ångström",
    "   ",
    "\n",
    "a",
    "UPPERCASE lowercase MiXeD CaSe",
    "URL: https://example.com/path?query=1&b=2#frag",
    "email@example.org, @handle, #hashtag",
    "JSON: {\"key\": [1, 2, {\"nested\": null}], \"t\": true}",
    "Math: ∑_{i=1}^{n} i² = n(n+1)/2 ≤ ∞ ± √2",
    "Punctuation!!! ??? ... --- ((( ))) [[[ ]]] {{{ }}}",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "Text with special <|endoftext|> in the middle",
    "A long sentence that keeps going and going, with commas, clauses, and enough words to make the tokenizer merge many common English pieces together properly.",
    "snake_case_identifier camelCaseIdentifier PascalCase kebab-case SCREAMING_CASE",
    "’Curly quotes’ “double” — em dash – en dash … ellipsis",
    "Zero\u200bwidth\u00a0nbsp",
    "1 22 333 4444 55555",
]
SPECIAL = {26, 27}  # indices of texts tokenized with special-token parsing

PROMPTS = [
    ("chat", "What is the capital of France?"),
    ("chat", "Write a haiku about the sea."),
    ("chat", "Explain what a prefix tree is in one sentence."),
    ("chat", "List three primary colors."),
    ("chat", "How do I reverse a list in Python?"),
    ("raw", "The history of the Roman Empire"),
    ("raw", "def quicksort(arr):\n"),
    ("raw", "Once upon a time, in a small village,"),
    ("raw", "1, 2, 3, 4, 5,"),
    ("raw", "The three laws of thermodynamics are"),
    ("raw", "Bonjour, je m'appelle"),
    ("chat", "Translate 'good morning' to Spanish."),
]
SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


def chatml(user):
    return (f"<|im_start|>system\n{SYSTEM}<|im_end|>\n"
            f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n")


def main():
    llm = llama_cpp.Llama(model_path=model, n_ctx=1024, n_threads=2, logits_all=True,
                          type_k=0, type_v=0, flash_attn=False, verbose=False, seed=0)
    data = {"model": os.path.basename(model), "tokenize": [], "greedy": []}
    for i, t in enumerate(TEXTS):
        ids = llm.tokenize(t.encode(), add_bos=False, special=i in SPECIAL)
        data["tokenize"].append({"text": t, "special": i in SPECIAL, "ids": ids})
    import numpy as np
    for kind, p in PROMPTS:
        text = chatml(p) if kind == "chat" else p
        ids = llm.tokenize(text.encode(), add_bos=False, special=True)
        llm.reset()
        llm.eval(ids)
        out, gaps, top = [], [], []
        for step in range(32):
            logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float64)
            order = np.argsort(-logits)
            tok = int(order[0])
            out.append(tok)
            gaps.append(float(logits[order[0]] - logits[order[1]]))
            if step == 0:
                top = [[int(k), float(logits[k])] for k in order[:5]]
            llm.eval([tok])
        data["greedy"].append({"prompt": text, "prompt_ids": ids, "continuation": out,
                               "top2_gaps": gaps, "first_top5": top})
    # With PPL_CTX: llama-perplexity over tests/data/perplexity_text.md in
    # windows of PPL_CTX tokens (fp16 K/V, its default), for
    # Conformance.PerplexityMatchesLlamaCpp on this file.
    ppl_ctx = int(os.environ.get("PPL_CTX", "0"))
    if ppl_ctx:
        import re, subprocess
        chunks = int(os.environ.get("PPL_CHUNKS", "16"))
        bin_dir = work / "llama.cpp" / "build" / "bin"
        log = subprocess.run([str(bin_dir / "llama-perplexity"), "-m", model, "-f",
                              str(root / "tests" / "data" / "perplexity_text.md"), "-c", str(ppl_ctx),
                              "--chunks", str(chunks), "-t", "2"], capture_output=True, text=True,
                             env={**os.environ, "LD_LIBRARY_PATH": str(bin_dir)}).stderr
        m = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", log)
        if not m:
            sys.exit("llama-perplexity printed no final estimate:\n" + log[-2000:])
        data["perplexity"] = {"ctx": ppl_ctx, "chunks": chunks, "ppl": float(m.group(1)),
                              "error": float(m.group(2))}
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {out_path}: {len(data['tokenize'])} texts, {len(data['greedy'])} prompts")


if __name__ == "__main__":
    main()
