#!/usr/bin/env python3
"""Writes a GGUF of a supported architecture with random weights and a real
vocabulary, for checking chunkserve against llama.cpp where no real weights
reach this machine (issue 25): PyPI's `gguf` writes the file, the tokenizer
keys are copied from the llama-cpp-python sdist's ggml-vocab-*.gguf (unpacked
by build_llama_cpp.sh, or fetched into tests/data/vocab by
scripts/fetch_vocabs.sh).

    make_synthetic.py PRESET OUT.gguf [--seed N]

Presets (F16 matrices, F32 norms, biases and frequency factors):
  llama3   Llama 3 departures at a small size: llama-bpe vocabulary (128256),
           d 512, 4 layers, 8 heads / 2 K/V heads, tied embeddings, rope_freqs
           from Llama 3.1's scaling rule
  qwen2    qwen2 vocabulary (151936), d 512, 4 layers, Q/K/V biases
  qwen3    qwen2 vocabulary, d 512, 4 layers, head_dim 128, per-head Q/K norms
  qwen3-yarn  qwen3 with YaRN RoPE scaling (factor 4 over an original context of
           2048, as Qwen3's long-context configurations set it)
  qwen3moe qwen2 vocabulary, d 512, 4 layers, Qwen 3's attention, a mixture of
           16 experts of 256 per layer, 4 per token (router in F32)
  qwen3moe-a3b-12  Qwen3-30B-A3B's widths, experts and routing with 12 of its 48
           layers: d 2048, 32 heads / 4 K/V heads, head_dim 128, 128 experts
           of 768, 8 per token (14.5 GB as F16; ~4.5 GB at Q4_K_M)
  gpt-oss  gpt-oss's departures at a small size: o200k vocabulary (201088, with
           the harmony chat template; scripts/make_o200k_vocab.py), d 640,
           4 layers (the even ones sliding over 128 positions), 8 heads / 2 K/V
           heads of 64, attention sinks, YaRN (factor 32 over 4096, as gpt-oss),
           biases on Q/K/V, output, router and experts, 16 experts of 256, 4 per
           token (softmax over the chosen), clamped SwiGLU
  gpt-oss-tiny  the same at the least size (d 64, 2 layers, 4 experts of 64, 2
           per token; 51 MB, nearly all the vocabulary's embeddings): for
           tests of what the o200k vocabulary's harmony markup does in a reply
  gpt-oss-20b-8  gpt-oss-20b's widths, experts and routing with 8 of its 24
           layers: d 2880, 64 heads / 8 K/V heads of 64, 32 experts of 2880,
           4 per token (14.4 GiB as F16; 4.5 GiB at llama-quantize MXFP4_MOE)
  phi3     Phi-4-mini's departures at a small size: phi-3 vocabulary (32064,
           SentencePiece), d 512, 4 layers, 4 heads / 2 K/V heads of 128 turned
           over their first 96 dimensions, fused Q/K/V and gate/up matrices,
           LongRoPE: short and long factors with rope.scaling.attn_factor for a
           context of 8192 over an original 256 (so a 512-token window turns
           with the long factors), and Phi-3's sliding_window key (unused)
  phi3-short  the same with an original context of 1024: a 512-token window
           turns with the short factors
  phi35    Phi-3.5-mini's: head dim 96 (d 384, 4 heads, as many K/V heads), RoPE
           over all of it, LongRoPE as phi3 (an original context of 256)
  phi4     Phi-4's: the phi3 architecture with full RoPE and no LongRoPE
  mistral-small  Mistral Small 3.x's departures at a small size: the llama
           architecture with the Tekken vocabulary (131072; scripts/
           make_tekken_vocab.py), d 512, 4 layers, 8 heads / 2 K/V heads of 128
           (a query width of 1024 over d 512, as 32 x 128 over 5120), RoPE base 1e8
  ministral3  Ministral 3's (arch mistral3): mistral-small's shape and vocabulary,
           YaRN factor 16 over an original 128 with log-multiplier 1 (its
           mscale_all_dim), Llama 4's attention temperature 0.1 (so a 512-token
           window's queries past 128 are tempered)
  smollm3  SmolLM3's (arch smollm3): llama-bpe vocabulary, d 512, 8 layers (the
           4th and 8th without RoPE), 8 heads / 2 K/V heads, tied embeddings
  granite  Granite 3.x's (arch granite): llama-bpe vocabulary, d 512, 4 layers,
           8 heads / 2 K/V heads, its multipliers: embeddings x 1.5, each block's
           output x 0.5, attention scale 0.0625, logits / 0.25 (Granite 3.3's are
           12, 0.22, 1/64 and 8, which on random tied weights leave each token
           predicting itself by ~30 nats, and random logits / 8 nearly uniform:
           nothing to compare), its own output head
  gemma2   Gemma 2's departures at a small size: Gemma 3 270M's vocabulary (262144,
           SentencePiece; the default model's, scripts/fetch_gemma.sh), d 512,
           4 layers (the even ones sliding over 128 positions), 4 heads / 2 K/V
           heads of 256, post-norms x 10 (on random tied weights the token's own
           embedding, x sqrt(d) in the residual, would otherwise predict the
           token itself everywhere), GeGLU, tied, scores soft-capped at 4 and
           logits at 8 (Gemma 2's caps are 50 and 30, which random weights'
           scores of a few units and logits of ~3 never reach: caps near the
           values' sizes bend the largest, so a cap misapplied shows)
  glm4     GLM-4-0414's departures at a small size: the llama-bpe vocabulary
           under GLM-4's pre-tokenizer name (`glm4`: Llama 3's pattern, whole
           words not merged, no BOS), d 512, 4 layers, 4 heads / 2 K/V heads of
           128 turned over their first 64 dimensions in adjacent pairs, Q/K/V
           biases, the gate and up projections fused in ffn_up, pre- and
           post-norms, its own output head
  olmo2    OLMo 2's departures at a small size: llama-bpe vocabulary (its regex is
           the dbrx pre-tokenizer's, which OLMo 2's cl100k-based files name), d
           512, 4 layers, 8 heads / 2 K/V heads, no norms before the blocks,
           post-norms on their outputs, Q/K norms over the whole projection, its
           own output head
  olmo3    OLMo 3's: olmo2 with 3 of every 4 layers sliding over 128 positions,
           YaRN factor 8 over 8192 on the global layers, unscaled on the sliding
  llama3-1b  Llama-3.2-1B's shapes: 16 layers, d 2048, 32 heads / 8 K/V heads,
           FFN 8192, llama-bpe vocabulary, tied embeddings (2.5 GB as F16;
           bench/peers/make_1b.sh quantizes it to Q4_K_M)

Random weights are scaled so that attention scores and logits have a spread of
a few units: a bug in RoPE's pairing, a bias or a norm moves the next-token
distributions far, where near-zero logits would hide it.
"""
import argparse
import math
import os
import sys

import numpy as np

try:
    import gguf
except ImportError:
    sys.exit("make_synthetic.py needs PyPI's gguf (scripts/setup.sh installs it)")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
VOCAB_DIRS = [os.path.join(ROOT, "tests", "data", "vocab")]

PRESETS = {
    "llama3": dict(arch="llama", vocab="llama-bpe", d=512, layers=4, heads=8, kv=2, ff=1536,
                   base=500000.0, rope_freqs=True, eps=1e-5),
    "qwen2": dict(arch="qwen2", vocab="qwen2", d=512, layers=4, heads=8, kv=2, ff=1536, base=1e6,
                  bias=True, eps=1e-6),
    "qwen3": dict(arch="qwen3", vocab="qwen2", d=512, layers=4, heads=8, kv=2, ff=1536, base=1e6,
                  head_dim=128, qk_norm=True, eps=1e-6),
    "qwen3-yarn": dict(arch="qwen3", vocab="qwen2", d=512, layers=4, heads=8, kv=2, ff=1536, base=1e6,
                       head_dim=128, qk_norm=True, eps=1e-6, yarn=(4.0, 2048)),
    "qwen3moe": dict(arch="qwen3moe", vocab="qwen2", d=512, layers=4, heads=8, kv=2, ff=1536, base=1e6,
                     head_dim=128, qk_norm=True, eps=1e-6, experts=16, used=4, ff_exp=256),
    "qwen3moe-a3b-12": dict(arch="qwen3moe", vocab="qwen2", d=2048, layers=12, heads=32, kv=4, ff=6144,
                            base=1e6, head_dim=128, qk_norm=True, eps=1e-6, experts=128, used=8, ff_exp=768),
    "gpt-oss": dict(arch="gpt-oss", vocab="o200k", d=640, layers=4, heads=8, kv=2, ff=256, base=150000.0,
                    head_dim=64, eps=1e-5, experts=16, used=4, ff_exp=256, yarn=(32.0, 4096), oss=True,
                    window=128),
    "gpt-oss-tiny": dict(arch="gpt-oss", vocab="o200k", d=64, layers=2, heads=2, kv=1, ff=64, base=150000.0,
                         head_dim=64, eps=1e-5, experts=4, used=2, ff_exp=64, yarn=(32.0, 4096), oss=True,
                         window=128),
    "gpt-oss-20b-8": dict(arch="gpt-oss", vocab="o200k", d=2880, layers=8, heads=64, kv=8, ff=2880,
                          base=150000.0, head_dim=64, eps=1e-5, experts=32, used=4, ff_exp=2880,
                          yarn=(32.0, 4096), oss=True, window=128),
    "phi3": dict(arch="phi3", vocab="phi-3", d=512, layers=4, heads=4, kv=2, ff=1536, base=10000.0,
                 head_dim=128, rope_dims=96, eps=1e-5, fused=True, longrope=256, window=2047),
    "phi3-short": dict(arch="phi3", vocab="phi-3", d=512, layers=4, heads=4, kv=2, ff=1536, base=10000.0,
                       head_dim=128, rope_dims=96, eps=1e-5, fused=True, longrope=1024, window=2047),
    "phi35": dict(arch="phi3", vocab="phi-3", d=384, layers=4, heads=4, kv=4, ff=1024, base=10000.0,
                  head_dim=96, rope_dims=96, eps=1e-5, fused=True, longrope=256, window=262144),
    "phi4": dict(arch="phi3", vocab="phi-3", d=512, layers=4, heads=4, kv=2, ff=1536, base=250000.0,
                 head_dim=128, eps=1e-5, fused=True, window=0),
    "mistral-small": dict(arch="llama", vocab="tekken", d=512, layers=4, heads=8, kv=2, ff=1536,
                          base=1e8, head_dim=128, eps=1e-5),
    "ministral3": dict(arch="mistral3", vocab="tekken", d=512, layers=4, heads=8, kv=2, ff=1536,
                       base=1e6, head_dim=128, eps=1e-5, yarn=(16.0, 128), yarn_log_mul=1.0, temp=0.1),
    "smollm3": dict(arch="smollm3", vocab="llama-bpe", d=512, layers=8, heads=8, kv=2, ff=1536,
                    base=5e6, eps=1e-6),
    "granite": dict(arch="granite", vocab="llama-bpe", d=512, layers=4, heads=8, kv=2, ff=1536,
                    base=10000.0, eps=1e-5, granite=(1.5, 0.5, 0.0625, 0.25), untied=True),
    "gemma2": dict(arch="gemma2", vocab="gemma", d=512, layers=4, heads=4, kv=2, ff=1536, base=10000.0,
                   head_dim=256, eps=1e-6, window=128, post_norms=True, softcaps=(4.0, 8.0), post_norm_gain=10.0),
    "glm4": dict(arch="glm4", vocab="llama-bpe", pre="glm4", d=512, layers=4, heads=4, kv=2, ff=1536,
                 base=10000.0, head_dim=128, rope_dims=64, eps=1e-5, bias=True, fused_ffn=True, post_norms=True,
                 untied=True),
    "olmo2": dict(arch="olmo2", vocab="llama-bpe", d=512, layers=4, heads=8, kv=2, ff=1536, base=500000.0,
                  eps=1e-6, post_norms=True, no_pre_norms=True, qk_norm_full=True, untied=True),
    "olmo3": dict(arch="olmo2", vocab="llama-bpe", d=512, layers=4, heads=8, kv=2, ff=1536, base=500000.0,
                  eps=1e-6, post_norms=True, no_pre_norms=True, qk_norm_full=True, untied=True, window=128,
                  yarn=(8.0, 8192)),
    "llama3-1b": dict(arch="llama", vocab="llama-bpe", d=2048, layers=16, heads=32, kv=8, ff=8192,
                      base=500000.0, rope_freqs=True, eps=1e-5),
}


def vocab_file(name):
    if name == "gemma":  # the default model's, whose tokenizer keys Gemma 2's files share
        p = os.path.join(ROOT, "models", "gemma-3-270m-q4_k_m.gguf")
        if os.path.exists(p):
            return p
        sys.exit(f"{p} not found: run scripts/fetch_gemma.sh")
    for d in VOCAB_DIRS:
        p = os.path.join(d, f"ggml-vocab-{name}.gguf")
        if os.path.exists(p):
            return p
    sys.exit(f"ggml-vocab-{name}.gguf not found in {VOCAB_DIRS}: run scripts/fetch_vocabs.sh")


def copy_tokenizer(w, path, pre=None):
    r = gguf.GGUFReader(path)
    if pre:
        w.add_string("tokenizer.ggml.pre", pre)
    for key, field in r.fields.items():
        if not key.startswith("tokenizer.") or (pre and key == "tokenizer.ggml.pre"):
            continue
        value, vtype = field.contents(), field.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            w.add_array(key, value)
        elif vtype == gguf.GGUFValueType.STRING:
            w.add_string(key, value)
        elif vtype == gguf.GGUFValueType.BOOL:
            w.add_bool(key, value)
        elif vtype == gguf.GGUFValueType.UINT32:
            w.add_uint32(key, value)
        elif vtype == gguf.GGUFValueType.INT32:
            w.add_int32(key, value)
        else:
            sys.exit(f"{path}: key {key} has a type this script does not copy ({vtype})")
    return len(r.fields["tokenizer.ggml.tokens"].contents())


def llama31_factors(head_dim, base, factor=32.0, low=1.0, high=4.0, old_ctx=8192):
    """Llama 3.1's long-context rule: fast dimensions keep their frequency,
    slow ones are divided by `factor`, the band between is interpolated."""
    out = []
    for i in range(0, head_dim, 2):
        wavelen = 2 * math.pi * base ** (i / head_dim)
        if wavelen < old_ctx / high:
            out.append(1.0)
        elif wavelen > old_ctx / low:
            out.append(factor)
        else:
            smooth = (old_ctx / wavelen - low) / (high - low)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("preset", choices=sorted(PRESETS))
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    p = PRESETS[a.preset]
    rng = np.random.default_rng(a.seed)
    arch, d, ff, heads, kv = p["arch"], p["d"], p["ff"], p["heads"], p["kv"]
    hd = p.get("head_dim", d // heads)

    w = gguf.GGUFWriter(a.out, arch)
    w.add_name(f"synthetic-{a.preset}")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_block_count(p["layers"])
    w.add_context_length(8192)
    w.add_embedding_length(d)
    w.add_feed_forward_length(ff)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_rope_freq_base(p["base"])
    w.add_layer_norm_rms_eps(p["eps"])
    w.add_rope_dimension_count(p.get("rope_dims", hd))
    if "longrope" in p:
        # Phi-3's converter: the original context, and cos/sin scaled by
        # sqrt(1 + ln(s) / ln(original)) for the context's growth s.
        w.add_rope_scaling_orig_ctx_len(p["longrope"])
        w.add_rope_scaling_attn_factors(math.sqrt(1 + math.log(8192 / p["longrope"]) / math.log(p["longrope"])))
    if "yarn" in p:
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(p["yarn"][0])
        w.add_rope_scaling_orig_ctx_len(p["yarn"][1])
    if "yarn_log_mul" in p:
        w.add_rope_scaling_yarn_log_mul(p["yarn_log_mul"])
    if "temp" in p:
        w.add_attn_temperature_scale(p["temp"])
    if "granite" in p:
        emb, res, att, logit = p["granite"]
        w.add_embedding_scale(emb)
        w.add_residual_scale(res)
        w.add_attention_scale(att)
        w.add_logit_scale(logit)
    if "softcaps" in p:
        w.add_attn_logit_softcapping(p["softcaps"][0])
        w.add_final_logit_softcapping(p["softcaps"][1])
    if "experts" in p:
        w.add_expert_count(p["experts"])
        w.add_expert_used_count(p["used"])
        w.add_expert_feed_forward_length(p["ff_exp"])
    if "window" in p:
        w.add_sliding_window(p["window"])  # phi3: written by its converter, unused
    if "head_dim" in p:
        w.add_key_length(hd)
        w.add_value_length(hd)
    n_vocab = copy_tokenizer(w, vocab_file(p["vocab"]), p.get("pre"))
    if arch == "llama":
        w.add_vocab_size(n_vocab)

    def mat(rows, cols, std):
        return (rng.standard_normal((rows, cols), dtype=np.float32) * std).astype(np.float16)

    def experts(n, rows, cols, std):  # n stacked [rows][cols] matrices: GGUF ne = {cols, rows, n}
        out = np.empty((n, rows, cols), dtype=np.float16)
        for e in range(n):
            out[e] = mat(rows, cols, std)
        return out

    def vec(n, mean, std):
        return (mean + rng.standard_normal(n, dtype=np.float32) * std).astype(np.float32)

    # Tied embeddings: logits = e_v . h with h normed (entries ~1), so an
    # embedding std of 3/sqrt(d) gives logits of std ~3.
    w.add_tensor("token_embd.weight", mat(n_vocab, d, p.get("emb_std", 3.0) / math.sqrt(d)))
    w.add_tensor("output_norm.weight", vec(d, 1.0, 0.1))
    if p.get("oss") or p.get("untied"):  # gpt-oss's head is its own (llama.cpp requires output.weight)
        w.add_tensor("output.weight", mat(n_vocab, d, 3.0 / math.sqrt(d)))
    if p.get("rope_freqs"):
        w.add_tensor("rope_freqs.weight", llama31_factors(hd, p["base"]))
    if "longrope" in p:
        # Short factors near 1, long ones rising to 32 for the slow pairs,
        # as Phi-3.5's and Phi-4-mini's lists go.
        rd = p["rope_dims"]
        w.add_tensor("rope_factors_short.weight", vec(rd // 2, 1.0, 0.05).clip(0.9, None))
        w.add_tensor("rope_factors_long.weight", llama31_factors(rd, p["base"], old_ctx=p["longrope"]))
    proj = 1.5 / math.sqrt(d)  # q, k entries of std ~1.5: scores of a few units
    for l in range(p["layers"]):
        b = f"blk.{l}."
        if not p.get("no_pre_norms"):
            w.add_tensor(b + "attn_norm.weight", vec(d, 1.0, 0.1))
        if p.get("fused"):  # Phi-3: the queries' rows, then the keys', then the values'
            w.add_tensor(b + "attn_qkv.weight", np.concatenate(
                [mat(heads * hd, d, proj), mat(kv * hd, d, proj), mat(kv * hd, d, 1.0 / math.sqrt(d))]))
        else:
            w.add_tensor(b + "attn_q.weight", mat(heads * hd, d, proj))
            w.add_tensor(b + "attn_k.weight", mat(kv * hd, d, proj))
            w.add_tensor(b + "attn_v.weight", mat(kv * hd, d, 1.0 / math.sqrt(d)))
        w.add_tensor(b + "attn_output.weight", mat(d, heads * hd, 0.5 / math.sqrt(heads * hd)))
        if p.get("oss"):
            # Biases everywhere; sinks near the scores' own size, so some heads
            # give the sink much of their weight and some little.
            w.add_tensor(b + "attn_q.bias", vec(heads * hd, 0.0, 0.5))
            w.add_tensor(b + "attn_k.bias", vec(kv * hd, 0.0, 0.5))
            w.add_tensor(b + "attn_v.bias", vec(kv * hd, 0.0, 0.2))
            w.add_tensor(b + "attn_output.bias", vec(d, 0.0, 0.1))
            w.add_tensor(b + "attn_sinks.weight", vec(heads, 1.0, 1.5))
        if p.get("bias"):
            w.add_tensor(b + "attn_q.bias", vec(heads * hd, 0.0, 0.5))
            w.add_tensor(b + "attn_k.bias", vec(kv * hd, 0.0, 0.5))
            w.add_tensor(b + "attn_v.bias", vec(kv * hd, 0.0, 0.2))
        if p.get("qk_norm"):
            w.add_tensor(b + "attn_q_norm.weight", vec(hd, 1.0, 0.2))
            w.add_tensor(b + "attn_k_norm.weight", vec(hd, 1.0, 0.2))
        if p.get("qk_norm_full"):  # OLMo 2: over the whole projection
            w.add_tensor(b + "attn_q_norm.weight", vec(heads * hd, 1.0, 0.2))
            w.add_tensor(b + "attn_k_norm.weight", vec(kv * hd, 1.0, 0.2))
        if p.get("post_norms"):  # Gemma: on each block's output, before its residual
            g = p.get("post_norm_gain", 1.0)
            w.add_tensor(b + "post_attention_norm.weight", vec(d, g, 0.1 * g))
            w.add_tensor(b + "post_ffw_norm.weight", vec(d, g, 0.1 * g))
        # gpt-oss's FFN input norm is named post_attention_norm.
        if not p.get("no_pre_norms"):
            w.add_tensor(b + ("post_attention_norm.weight" if p.get("oss") else "ffn_norm.weight"), vec(d, 1.0, 0.1))
        if "experts" in p:
            n, fx = p["experts"], p["ff_exp"]
            # Router logits of std ~2.5: each token prefers a few experts, not one.
            w.add_tensor(b + "ffn_gate_inp.weight", (rng.standard_normal((n, d), dtype=np.float32) * 2.5 / math.sqrt(d)))
            w.add_tensor(b + "ffn_gate_exps.weight", experts(n, fx, d, 1.0 / math.sqrt(d)))
            w.add_tensor(b + "ffn_up_exps.weight", experts(n, fx, d, 1.0 / math.sqrt(d)))
            w.add_tensor(b + "ffn_down_exps.weight", experts(n, d, fx, 0.5 / math.sqrt(fx)))
            if p.get("oss"):
                # Gate and up values of std ~1-2 with these biases, so the
                # clamps at 7 are reached now and then.
                w.add_tensor(b + "ffn_gate_inp.bias", vec(n, 0.0, 1.0))
                w.add_tensor(b + "ffn_gate_exps.bias", np.stack([vec(fx, 0.0, 1.0) for _ in range(n)]))
                w.add_tensor(b + "ffn_up_exps.bias", np.stack([vec(fx, 0.0, 1.0) for _ in range(n)]))
                w.add_tensor(b + "ffn_down_exps.bias", np.stack([vec(d, 0.0, 0.1) for _ in range(n)]))
            continue
        if p.get("fused") or p.get("fused_ffn"):  # Phi-3, GLM-4: the gate's rows, then the up projection's
            w.add_tensor(b + "ffn_up.weight", np.concatenate([mat(ff, d, 1.0 / math.sqrt(d)),
                                                              mat(ff, d, 1.0 / math.sqrt(d))]))
            w.add_tensor(b + "ffn_down.weight", mat(d, ff, 0.5 / math.sqrt(ff)))
            continue
        w.add_tensor(b + "ffn_gate.weight", mat(ff, d, 1.0 / math.sqrt(d)))
        w.add_tensor(b + "ffn_up.weight", mat(ff, d, 1.0 / math.sqrt(d)))
        w.add_tensor(b + "ffn_down.weight", mat(d, ff, 0.5 / math.sqrt(ff)))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"{a.out}: {a.preset}, vocabulary {n_vocab}")


if __name__ == "__main__":
    main()
