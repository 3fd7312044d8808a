"""Our dequantizers against an independent implementation, bit for bit: gguf's
numpy dequantizers (PyPI `gguf`) on random blocks of every type we read.

Run by CTest: python3 quant_reference_test.py DEQUANT_TOOL
"""
import subprocess
import sys
import unittest

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as T, quants

TOOL = None
# Byte offsets of each block's fp16 fields (scales, minimums): set to random
# finite values, since random bytes there would often be inf or nan.
F16_FIELDS = {"Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0],
              "Q2_K": [80, 82], "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208],
              "IQ4_NL": [0], "IQ4_XS": [0], "MXFP4": []}


def random_blocks(name, n_blocks, rng):
    block_elems, block_bytes = GGML_QUANT_SIZES[T[name]]
    if name == "F16":
        return rng.uniform(-4, 4, n_blocks).astype(np.float16).view(np.uint8)
    if name == "BF16":
        return (rng.uniform(-4, 4, n_blocks).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)
    raw = rng.integers(0, 256, (n_blocks, block_bytes), dtype=np.uint8)
    for off in F16_FIELDS[name]:
        raw[:, off:off + 2] = rng.uniform(-2, 2, n_blocks).astype(np.float16).view(np.uint8).reshape(n_blocks, 2)
    return raw.reshape(-1)


def ours(name, raw):
    out = subprocess.run([TOOL, name], input=raw.tobytes(), capture_output=True, check=True).stdout
    return np.frombuffer(out, dtype=np.float32)


class Dequantize(unittest.TestCase):
    def test_every_type_bit_for_bit(self):
        rng = np.random.default_rng(7)
        for name in ["F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
                     "IQ4_NL", "IQ4_XS", "MXFP4"]:
            with self.subTest(type=name):
                raw = random_blocks(name, 200, rng)
                want = quants.dequantize(raw, T[name]).astype(np.float32).reshape(-1)
                got = ours(name, raw)
                self.assertEqual(got.shape, want.shape)
                diff = np.nonzero(got.view(np.uint32) != want.view(np.uint32))[0]
                self.assertEqual(len(diff), 0, f"{name}: {len(diff)} values differ, first at {diff[:1]}: "
                                               f"{got[diff[:1]]} vs {want[diff[:1]]}")

    def test_a_partial_block_is_refused(self):
        r = subprocess.run([TOOL, "Q4_K"], input=b"\0" * 100, capture_output=True)
        self.assertEqual(r.returncode, 1)
        self.assertIn(b"100 bytes are not whole Q4_K blocks", r.stderr)


if __name__ == "__main__":
    TOOL = sys.argv.pop(1)
    unittest.main()
