#!/usr/bin/env python3
"""Writes a GGUF's quantized tensors back as F16 or BF16 (PyPI's gguf
dequantizes them), every other tensor and every metadata key as they are:
a float file of a real model's shapes and values, for timing the float
matmul against llama.cpp and our own earlier builds (docs/benchmarks.md).

    widen.py IN.gguf OUT.gguf [F16|BF16]
"""
import sys

import numpy as np

try:
    import gguf
except ImportError:
    sys.exit("widen.py needs PyPI's gguf (scripts/setup.sh installs it)")

SCALARS = {
    gguf.GGUFValueType.UINT8: "add_uint8", gguf.GGUFValueType.INT8: "add_int8",
    gguf.GGUFValueType.UINT16: "add_uint16", gguf.GGUFValueType.INT16: "add_int16",
    gguf.GGUFValueType.UINT32: "add_uint32", gguf.GGUFValueType.INT32: "add_int32",
    gguf.GGUFValueType.UINT64: "add_uint64", gguf.GGUFValueType.INT64: "add_int64",
    gguf.GGUFValueType.FLOAT32: "add_float32", gguf.GGUFValueType.FLOAT64: "add_float64",
    gguf.GGUFValueType.BOOL: "add_bool", gguf.GGUFValueType.STRING: "add_string",
}


def main():
    if len(sys.argv) not in (3, 4) or (len(sys.argv) == 4 and sys.argv[3] not in ("F16", "BF16")):
        sys.exit(__doc__)
    src, out = sys.argv[1], sys.argv[2]
    kind = sys.argv[3] if len(sys.argv) == 4 else "F16"
    r = gguf.GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(out, arch)
    for key, field in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        if key == "general.file_type":
            w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if kind == "F16" else gguf.LlamaFileType.MOSTLY_BF16)
            continue
        vtype = field.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            w.add_array(key, field.contents())
        elif vtype in SCALARS:
            getattr(w, SCALARS[vtype])(key, field.contents())
        else:
            sys.exit(f"{src}: key {key} has a type this script does not copy ({vtype})")
    for t in r.tensors:
        shape = [int(n) for n in reversed(t.shape)]  # GGUF ne is innermost first
        if t.tensor_type in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16,
                             gguf.GGMLQuantizationType.BF16):
            w.add_tensor(t.name, np.asarray(t.data).reshape(shape), raw_dtype=t.tensor_type)
            continue
        values = gguf.quants.dequantize(t.data, t.tensor_type).reshape(shape).astype(np.float32)
        if kind == "F16":
            w.add_tensor(t.name, values.astype(np.float16))
        else:
            w.add_tensor(t.name, gguf.quants.quantize(values, gguf.GGMLQuantizationType.BF16),
                         raw_shape=gguf.quants.quant_shape_to_byte_shape(values.shape, gguf.GGMLQuantizationType.BF16),
                         raw_dtype=gguf.GGMLQuantizationType.BF16)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
