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
import base64
import json
import sys

try:
    import gguf
    import tiktoken
except ImportError:
    sys.exit("make_tekken_vocab.py needs PyPI's gguf and tiktoken (scripts/setup.sh installs them)")

from bpe_ranks import COMMON_TEXTS, byte_map, merges_of, vocab_args, write_vocab

# mistral_common's SpecialTokens, by rank (Tekkenizer.DEPRECATED_SPECIAL_TOKENS:
# what a tekken file without its own list has); the rest are <SPECIAL_i>.
SPECIALS = ["<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
            "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CALLS]", "[IMG]", "<pad>", "[IMG_BREAK]", "[IMG_END]",
            "[PREFIX]", "[MIDDLE]", "[SUFFIX]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[TOOL_CONTENT]"]

EXTRA_TEXTS = [
    "[INST] Hi [/INST]</s>",  # markup in plain text: taken as text
] + COMMON_TEXTS


def main():
    a = vocab_args(__doc__, "tekken_json")

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

    ids = {"unk": names.index("<unk>"), "bos": names.index("<s>"), "eos": names.index("</s>")}
    write_vocab(gguf, a, "ggml-vocab-tekken.gguf", "llama", "tekken " + cfg.get("version", ""), "tekken", tokens, types,
                merges, ids, True, EXTRA_TEXTS, lambda t: [i + n_special for i in enc.encode_ordinary(t)])


if __name__ == "__main__":
    main()
