#!/usr/bin/env python3
"""Writes a Hugging Face tokenizer directory (tokenizer.json,
tokenizer_config.json, config.json) for a GGUF model's vocabulary, for
routers that tokenize prompts themselves (vllm-router's kv_aware policy loads
one to hash prompts into the blocks our KV events announce).

    scripts/export_tokenizer.py MODEL.gguf OUT_DIR

Byte-level BPE vocabularies (tokenizer.ggml.model "gpt2") with the GPT-2 or
SmolLM pre-tokenizers are written; others are refused with the reason. The
tests check the result against chunkserve's own tokenizer
(tests/server/test_cluster.py)."""
import json
import os
import sys

from gguf import GGUFReader

# GGUF token types (llama.cpp's): 3 = control.
CONTROL = 3

# Pre-tokenizers by tokenizer.ggml.pre: GPT-2's regex (ByteLevel's own), after
# splitting digits one by one for SmolLM.
BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
PRE_TOKENIZERS = {
    "gpt-2": BYTE_LEVEL,
    "gpt2": BYTE_LEVEL,
    "smollm": {"type": "Sequence",
               "pretokenizers": [{"type": "Digits", "individual_digits": True}, BYTE_LEVEL]},
}


def field(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    if len(f.data) == 1:
        v = f.parts[f.data[0]]
        return bytes(v).decode("utf-8") if v.dtype.kind == "u" and v.dtype.itemsize == 1 and len(f.types) == 1 \
            and f.types[0].name == "STRING" else v.tolist()[0]
    return [bytes(f.parts[i]).decode("utf-8", errors="surrogateescape") if f.parts[i].dtype.itemsize == 1
            else f.parts[i].tolist()[0] for i in f.data]


def main(model, out):
    r = GGUFReader(model)
    kind, pre = field(r, "tokenizer.ggml.model"), field(r, "tokenizer.ggml.pre", "default")
    if kind != "gpt2" or pre not in PRE_TOKENIZERS:
        sys.exit(f"export_tokenizer: {model}: tokenizer {kind!r} with pre-tokenizer {pre!r} is not supported "
                 f"(byte-level BPE with {', '.join(sorted(PRE_TOKENIZERS))})")
    tokens = field(r, "tokenizer.ggml.tokens")
    types = field(r, "tokenizer.ggml.token_type")
    merges = field(r, "tokenizer.ggml.merges")
    bos, eos = field(r, "tokenizer.ggml.bos_token_id"), field(r, "tokenizer.ggml.eos_token_id")
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": True} for i, (t, ty) in enumerate(zip(tokens, types)) if ty == CONTROL]
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
        "pre_tokenizer": PRE_TOKENIZERS[pre], "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {t: i for i, t in enumerate(tokens)}, "merges": merges},
    }
    n_ctx = next((f.parts[f.data[0]].tolist()[0] for k, f in r.fields.items() if k.endswith(".context_length")), None)
    arch = field(r, "general.architecture")
    config = {"model_type": arch, "vocab_size": len(tokens), "bos_token_id": bos, "eos_token_id": eos,
              "max_position_embeddings": n_ctx}
    tok_config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": tokens[bos], "eos_token": tokens[eos],
                  "add_bos_token": bool(field(r, "tokenizer.ggml.add_bos_token", False)),
                  "model_max_length": n_ctx, "clean_up_tokenization_spaces": False}
    template = field(r, "tokenizer.chat_template")
    if template:
        tok_config["chat_template"] = template
    os.makedirs(out, exist_ok=True)
    for name, obj in (("tokenizer.json", tokenizer), ("tokenizer_config.json", tok_config), ("config.json", config)):
        with open(os.path.join(out, name), "w", encoding="utf-8") as f:
            json.dump(obj, f, ensure_ascii=False)
    print(f"export_tokenizer: {len(tokens)} tokens, {len(merges)} merges, pre-tokenizer {pre} -> {out}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
