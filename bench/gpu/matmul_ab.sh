#!/usr/bin/env bash
# The device matmul's split kernel against the tile kernel, in one run on the
# GPU machine (../shared/device/README.md), alternating rounds: the same
# binary, the tile kernel by CHUNKSERVE_CUDA_MATMUL=tile (every product on
# it). Prepared here as engine_check.sh's header says (.dev/ with chunkserve,
# llama-quantize, the llama-bpe vocabulary and PyPI's gguf wheel, for
# make_model.sh). There:
#   bench/gpu/matmul_ab.sh OUT_DIR [ROUNDS]
# 1. `bench matmul --device cuda` on a 1B-class layer's shapes (2048 x 8192,
#    8192 x 2048, 2048 x 2048) for Q4_K, Q6_K and Q4_1 at 1-128 tokens;
# 2. `bench model` (pp512, tg128) on make_synthetic.py's llama3-1b and
#    llama3 files (Q4_K_M), and `bench engine --pp 4096 --tg 32 --batch 32`
#    on the 1B file. OUT/matmul.jsonl, OUT/model.jsonl, OUT/engine.md, and a
#    summary on stdout.
set -uo pipefail
out=${1:?usage: matmul_ab.sh OUT_DIR [ROUNDS]}
rounds=${2:-2}
root=$(cd "$(dirname "$0")/../.." && pwd)
dev=$root/.dev
export LD_LIBRARY_PATH=$dev/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader | tee "$out/gpu.txt"
small=/tmp/models/llama3-small-Q4_K_M.gguf big=/tmp/models/llama3-1b-Q4_K_M.gguf
"$root/bench/gpu/make_model.sh" llama3 "$small" "$out/make.log" &
"$root/bench/gpu/make_model.sh" llama3-1b "$big" "$out/make.log"
wait
for r in $(seq "$rounds"); do
  for k in tile split; do
    for t in Q4_K Q6_K Q4_1; do
      for shape in "2048 8192 1 8 32 128" "8192 2048 1 32" "2048 2048 1"; do
        set -- $shape
        CHUNKSERVE_CUDA_MATMUL=$k "$dev/chunkserve" bench matmul --device cuda --type $t --rows $1 --cols $2 \
          --tokens "${@:3}" --json | sed "s/^/{\"kernel\": \"$k\", \"round\": $r} /" >> "$out/matmul.jsonl"
      done
    done
    for m in "$big" "$small"; do
      CHUNKSERVE_CUDA_MATMUL=$k timeout 60 "$dev/chunkserve" bench model -m "$m" --device cuda -r 3 --json |
        sed "s/^/{\"kernel\": \"$k\", \"round\": $r} /" >> "$out/model.jsonl"
    done
    CHUNKSERVE_CUDA_MATMUL=$k timeout 60 "$dev/chunkserve" bench engine -m "$big" --device cuda --pp 4096 --tg 32 \
      --batch 32 2>&1 | tail -1 | sed "s/^/$k $r /" >> "$out/engine.md"
  done
done
python3 - "$out" <<'P'
import json, sys
out = sys.argv[1]
def pairs(name):
    for line in open(f"{out}/{name}"):
        a, b = line.split("} ", 1)
        yield json.loads(a + "}"), json.loads(b)
for a, b in pairs("matmul.jsonl"):
    print(a["kernel"], a["round"], b["type"], b["rows"], "x", b["cols"], b["tokens"], "tokens:", b["us"], "us", b["weight_gbps"], "GB/s")
for a, b in pairs("model.jsonl"):
    print(a["kernel"], a["round"], b["model"], "pp512", b["pp_tps"], "tg128", b["tg_tps"])
P
cat "$out/engine.md"
