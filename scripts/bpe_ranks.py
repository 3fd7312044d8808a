"""What a vocabulary GGUF made from tiktoken-style BPE ranks needs, shared by
make_o200k_vocab.py and make_tekken_vocab.py: GPT-2's byte-to-unicode map
(byte-level tokens as llama.cpp's converter spells them), the merges
recovered from the ranks, and the .inp/.out test files."""
import argparse
import os
import sys

# Test texts beside llama.cpp's, each vocabulary's own markup first.
COMMON_TEXTS = [
    "CamelCaseWords and UPPER lower MiXeD don't DON'T we'll",
    "path/to/file.txt\n\n\nend  \t tabs",
    "12345678 3.14159 1,000,000",
    "Ünïcödé façade naïve — “quotes” 日本語のテキスト 한국어",
    "emoji 🦙🚀 and combining e\u0301 marks",
]


def byte_map():
    """GPT-2's reversible map from bytes to printable code points."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    out, extra = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return out


def split_of(token, ranks):
    """The two parts the byte-pair merges over ranks below the token's own
    join last (tiktoken's encoding, stopped before the token itself)."""
    limit = ranks[token]
    parts = [bytes([b]) for b in token]
    while True:
        best, at = None, None
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < limit and (best is None or r < best):
                best, at = r, i
        if best is None:
            break
        parts[at:at + 2] = [parts[at] + parts[at + 1]]
    if len(parts) != 2:
        sys.exit(f"token {token!r} (rank {limit}) does not split into two parts: {parts}")
    return parts


def merges_of(ranks, bmap):
    """Every multi-byte token's merge, "left right" in GPT-2's spelling, by rank."""
    out = []
    for tok, _ in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(tok) < 2:
            continue
        left, right = split_of(tok, ranks)
        out.append("".join(bmap[b] for b in left) + " " + "".join(bmap[b] for b in right))
    return out


def write_tests(path, texts, encode):
    """path.inp (texts) and path.out (encode(text)'s ids), llama.cpp's format."""
    with open(path + ".inp", "w", encoding="utf-8") as f:
        for t in texts:
            f.write(t + "\n__ggml_vocab_test__\n")
    with open(path + ".out", "w", encoding="utf-8") as f:
        for t in texts:
            f.write(" ".join(str(i) for i in encode(t)) + "\n")


def read_inp(path):
    with open(path, encoding="utf-8") as f:
        return f.read().split("\n__ggml_vocab_test__\n")[:-1]


def vocab_args(doc, source):
    """The scripts' command line: SOURCE OUT_DIR [--template FILE] [--inp FILE]."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(source)
    ap.add_argument("out_dir")
    ap.add_argument("--template", help="a chat template to store as tokenizer.chat_template")
    ap.add_argument("--inp", help="test texts (.inp format) to encode besides the built-in ones")
    return ap.parse_args()


def write_vocab(gguf, a, file_name, arch, name, pre, tokens, types, merges, special_ids, add_bos, texts, encode):
    """OUT_DIR/file_name: a vocabulary-only GGUF (byte-level BPE, pre-tokenizer
    `pre`, special_ids such as {"bos": 1} in that order, the --template), and
    its .inp/.out of --inp's texts then `texts`, encoded by `encode`."""
    os.makedirs(a.out_dir, exist_ok=True)
    path = os.path.join(a.out_dir, file_name)
    w = gguf.GGUFWriter(path, arch)
    w.add_name(name)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    for kind, i in special_ids.items():
        getattr(w, f"add_{kind}_token_id")(i)
    w.add_add_bos_token(add_bos)
    if a.template:
        with open(a.template, encoding="utf-8") as f:
            w.add_chat_template(f.read())
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    texts = (read_inp(a.inp) if a.inp else []) + texts
    write_tests(path, texts, encode)
    print(f"{path}: {len(tokens)} tokens, {len(merges)} merges, {len(texts)} test texts")
