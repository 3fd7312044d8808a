#!/usr/bin/env bash
# The 1B-class model of issue 25's benchmark: Llama-3.2-1B's shapes (16 layers,
# d 2048, 32 heads / 8 K/V heads, FFN 8192, the llama-bpe vocabulary of
# 128256, tied embeddings, Llama 3.1's rope_freqs) with random weights,
# written as F16 by make_synthetic.py and quantized to Q4_K_M by llama.cpp's
# llama-quantize (build_llama_cpp.sh builds it). Needs ~5 GB of disk.
#   bench/peers/make_1b.sh [OUT_DIR]   -> OUT_DIR/llama3-1b-Q4_K_M.gguf
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:-$here/.work/models}
bin="$here/.work/llama.cpp/build/bin"
mkdir -p "$out"
"$root/scripts/fetch_vocabs.sh"
[ -f "$out/llama3-1b-F16.gguf" ] || python3 "$here/make_synthetic.py" llama3-1b "$out/llama3-1b-F16.gguf"
if [ ! -f "$out/llama3-1b-Q4_K_M.gguf" ]; then
  LD_LIBRARY_PATH="$bin" "$bin/llama-quantize" "$out/llama3-1b-F16.gguf" "$out/llama3-1b-Q4_K_M.gguf" Q4_K_M 2 \
    > "$out/quantize.log" 2>&1 || { tail -20 "$out/quantize.log"; exit 1; }
fi
echo "$out/llama3-1b-Q4_K_M.gguf"
