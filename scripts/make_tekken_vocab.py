#!/usr/bin/env python3
"""Writes Mistral's Tekken tokenizer (Mistral Nemo, Mistral Small 3.x,
Devstral, Magistral, Ministral) as a vocabulary-only GGUF in llama.cpp's
conventions, with test texts and their token ids from tiktoken, which
Mistral's own tokenizer (mistral_common's Tekkenizer) runs, as the
independent reference:

    make_tekken_vocab.py TEKKEN_JSON OUT_DIR [--template FILE] [--inp FILE]

TEKKEN_JSON is a tekken_*.json of PyPI's mistral-common wheel
(mistral_common/data/; scripts/fetch_vocabs.sh takes tekken_240718.json,
Mistral Nemo's). Writes OUT_DIR/ggml-vocab-tekken.gguf with .inp and .out.
The file is what llama.cpp's converter writes for these models: the 1000
special tokens first (<unk>, <s>, </s>, [INST], ..., <SPECIAL_999>, control
tokens), then the byte-level BPE tokens of the first default_vocab_size - 1000
ranks (GPT-2's byte-to-unicode spelling), the merges recovered from the
ranks, pre-tokenizer "tekken", BOS <s>, EOS </s>. The ids in .out are
tiktoken's over the same ranks and the file's own pattern, plus 1000, as the
Tekkenizer computes them (encode_ordinary: special-token texts are text).
"""
import argparse
import base64
import json
import os
import sys

try:
    import gguf
    import tiktoken
except ImportError:
    sys.exit("make_tekken_vocab.py needs PyPI's gguf and tiktoken (scripts/setup.sh installs them)")

from bpe_ranks import COMMON_TEXTS, byte_map, merges_of, read_inp, write_tests

# mistral_common's SpecialTokens, by rank (Tekkenizer.DEPRECATED_SPECIAL_TOKENS:
# what a tekken file without its own list has); the rest are <SPECIAL_i>.
SPECIALS = ["<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
            "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CALLS]", "[IMG]", "<pad>", "[IMG_BREAK]", "[IMG_END]",
            "[PREFIX]", "[MIDDLE]", "[SUFFIX]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[TOOL_CONTENT]"]

EXTRA_TEXTS = [
    "[INST] Hi [/INST]</s>",  # markup in plain text: taken as text
] + COMMON_TEXTS


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tekken_json")
    ap.add_argument("out_dir")
    ap.add_argument("--template", help="a chat template to store as tokenizer.chat_template")
    ap.add_argument("--inp", help="test texts (.inp format) to encode besides the built-in ones")
    a = ap.parse_args()

    with open(a.tekken_json, encoding="utf-8") as f:
        data = json.load(f)
    cfg = data["config"]
    n_special = cfg["default_num_special_tokens"]
    n_vocab = cfg["default_vocab_size"]
    if data.get("special_tokens"):
        names = [t["token_str"] for t in sorted(data["special_tokens"], key=lambda t: t["rank"])]
    else:
        names = list(SPECIALS)
    names += [f"<SPECIAL_{i}>" for i in range(len(names), n_special)]
    # The Tekkenizer keeps the ranks below the inner vocabulary's size.
    ranks = {}
    for t in data["vocab"]:
        if t["rank"] < n_vocab - n_special:
            ranks[base64.b64decode(t["token_bytes"])] = t["rank"]
    if sorted(ranks.values()) != list(range(n_vocab - n_special)):
        sys.exit("the ranks are not 0 .. vocabulary size - specials")
    enc = tiktoken.Encoding("tekken", pat_str=cfg["pattern"], mergeable_ranks=ranks, special_tokens={})

    bmap = byte_map()
    tokens = list(names) + [None] * (n_vocab - n_special)
    types = [3] * n_special + [1] * (n_vocab - n_special)  # specials are control tokens
    for tok, r in ranks.items():
        tokens[n_special + r] = "".join(bmap[b] for b in tok)
    merges = merges_of(ranks, bmap)

    os.makedirs(a.out_dir, exist_ok=True)
    path = os.path.join(a.out_dir, "ggml-vocab-tekken.gguf")
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("tekken " + cfg.get("version", ""))
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("tekken")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_unk_token_id(names.index("<unk>"))
    w.add_bos_token_id(names.index("<s>"))
    w.add_eos_token_id(names.index("</s>"))
    w.add_add_bos_token(True)
    if a.template:
        with open(a.template, encoding="utf-8") as f:
            w.add_chat_template(f.read())
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    texts = (read_inp(a.inp) if a.inp else []) + EXTRA_TEXTS
    write_tests(path, texts, lambda t: [i + n_special for i in enc.encode_ordinary(t)])
    print(f"{path}: {n_vocab} tokens, {len(merges)} merges, {len(texts)} test texts")


if __name__ == "__main__":
    main()
