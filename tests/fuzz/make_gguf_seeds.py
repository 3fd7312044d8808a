"""Writes the GGUF fuzz target's seed corpus: small files of every metadata
type, a tokenizer-shaped vocabulary and two tensors (python3 make_gguf_seeds.py)."""
import os
import struct

here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "gguf")


def s(x):
    b = x.encode()
    return struct.pack("<Q", len(b)) + b


def kv(key, type_id, payload):
    return s(key) + struct.pack("<I", type_id) + payload


def gguf(kvs, tensors, data=b"", version=3):
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs)) + b"".join(kvs)
    for name, ne, ttype, off in tensors:
        out += s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne)
        out += struct.pack("<IQ", ttype, off)
    out += b"\0" * (-len(out) % 32)
    return out + data


scalars = [kv("u8", 0, b"\x07"), kv("i8", 1, b"\xff"), kv("u16", 2, struct.pack("<H", 513)),
           kv("i16", 3, struct.pack("<h", -2)), kv("u32", 4, struct.pack("<I", 7)), kv("i32", 5, struct.pack("<i", -7)),
           kv("f32", 6, struct.pack("<f", 1.5)), kv("bool", 7, b"\x01"), kv("str", 8, s("hello")),
           kv("u64", 10, struct.pack("<Q", 1 << 40)), kv("i64", 11, struct.pack("<q", -(1 << 40))),
           kv("f64", 12, struct.pack("<d", 2.25))]
arrays = [kv("arr.str", 9, struct.pack("<IQ", 8, 2) + s("a") + s("b")),
          kv("arr.i32", 9, struct.pack("<IQ", 5, 3) + struct.pack("<3i", 1, 2, 3)),
          kv("arr.nested", 9, struct.pack("<IQ", 9, 1) + struct.pack("<IQ", 4, 1) + struct.pack("<I", 9))]
tensors = [("a", [4, 2], 0, 0), ("b", [32], 8, 32)]
data = struct.pack("<8f", *range(8)) + b"\0" * 0 + struct.pack("<e", 0.5) + bytes(range(32))
vocab = [kv("general.architecture", 8, s("llama")), kv("tokenizer.ggml.model", 8, s("gpt2")),
         kv("tokenizer.ggml.tokens", 9, struct.pack("<IQ", 8, 3) + s("a") + s("b") + s("ab")),
         kv("tokenizer.ggml.merges", 9, struct.pack("<IQ", 8, 1) + s("a b"))]
os.makedirs(here, exist_ok=True)
for name, blob in {"scalars.gguf": gguf(scalars, []), "arrays.gguf": gguf(arrays, []),
                   "tensors.gguf": gguf(scalars[:2], tensors, data), "vocab.gguf": gguf(vocab, []),
                   "v2.gguf": gguf(scalars[:3], [], version=2), "empty.gguf": gguf([], [])}.items():
    with open(os.path.join(here, name), "wb") as f:
        f.write(blob)
