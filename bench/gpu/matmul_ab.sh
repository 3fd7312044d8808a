#!/usr/bin/env bash
# The device matmul's kernels against each other, in one run on the GPU
# machine (../shared/device/README.md), in turns: tile (prefill's default),
# split (decode's default), stream and staged (model/cuda_matmul_kernels.cu). Prepared here as
# engine_check.sh's header says (.dev/ with chunkserve, unit_tests,
# llama-quantize, the llama-bpe vocabulary and PyPI's gguf wheel, for
# make_model.sh; model_tests too). There:
#   bench/gpu/matmul_ab.sh OUT_DIR [ROUNDS]     (ROUNDS of step 2, default 1:
#                                              about 8 minutes in all, by estimate)
# 0. unit_tests CudaMatmul.* (every kernel the CPU's bits) and CudaOps.*
#    (the layer steps, their quantizing norms, the forward passes), and
#    compute-sanitizer's racecheck and memcheck over each kernel; the
#    small file's logits on the stream and staged kernels the CPU's bit for
#    bit;
# 1. `bench matmul --device cuda --kernel tile split stream staged` (timed in
#    turns, the L2 emptied and the host's queueing hidden before each call)
#    on a 1B-class layer's shapes (2048 x 8192, 8192 x 2048, 2048 x 2048,
#    512 x 2048) and its head
#    (128256 x 2048) for Q4_K, Q6_K and Q4_1 at 1-512 tokens;
# 2. `bench model` (pp512, tg128) on make_synthetic.py's llama3-1b and
#    llama3 files (Q4_K_M), and `bench engine --pp 4096 --tg 32 --batch 32`
#    on the 1B file, each choice by CHUNKSERVE_CUDA_MATMUL: split,tile (the
#    default: decode's few tokens on split, the rest on tile), stream,staged
#    and stream (every product on it);
# 3. their profiles (`--profile`) under split,tile and stream,staged.
# OUT/matmul.jsonl, OUT/model.jsonl, OUT/engine.md, OUT/profile.md, and a
# summary on stdout.
set -uo pipefail
out=${1:?usage: matmul_ab.sh OUT_DIR [ROUNDS]}
rounds=${2:-1}
root=$(cd "$(dirname "$0")/../.." && pwd)
dev=$root/.dev
export LD_LIBRARY_PATH=$dev/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader | tee "$out/gpu.txt"
small=/tmp/models/llama3-small-Q4_K_M.gguf big=/tmp/models/llama3-1b-Q4_K_M.gguf
"$root/bench/gpu/make_model.sh" llama3 "$small" "$out/make.log" &
"$root/bench/gpu/make_model.sh" llama3-1b "$big" "$out/make.log" &

timeout 150 "$dev/unit_tests" --gtest_filter='CudaMatmul.*:CudaOps.*' > "$out/unit.log" 2>&1
echo "CudaMatmul and CudaOps tests: exit $? ($(grep -E '^\[  (PASSED|FAILED)' "$out/unit.log" | tr '\n' ' '))"
# The sanitizers on a few launches of each kernel whose rings wrap (8192
# columns: 8-16 chunks a group against at most 8 slots), several items a CTA.
if command -v compute-sanitizer >/dev/null; then
  for tool in racecheck memcheck; do
    for t in Q4_K Q6_K Q4_1; do
      timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 "$dev/chunkserve" bench matmul --device cuda \
        --kernel tile split stream staged --type $t --rows 600 --cols 8192 --tokens 1 9 70 -r 1 --warm-l2 \
        >> "$out/$tool.log" 2>&1
      echo "$tool $t: exit $? ($(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/$tool.log" | tail -1))"
    done
  done
fi
wait
for k in stream stream,staged; do
  CHUNKSERVE_CUDA_MATMUL=$k CS_GPU_TEST_MODEL=$small timeout 90 "$dev/model_tests" \
    --gtest_filter='CudaModel.ForwardLogits*' > "$out/model_$k.log" 2>&1
  echo "CudaModel.ForwardLogits* with CHUNKSERVE_CUDA_MATMUL=$k: exit $?"
done

# The matmul's kernels timed in turns within each call (--kernel, several).
for t in Q4_K Q6_K Q4_1; do
  for shape in "2048 8192 1 8 32 512" "8192 2048 1 8 32 512" "2048 2048 1 8" "512 2048 1" "128256 2048 1 2"; do
    set -- $shape
    timeout 60 "$dev/chunkserve" bench matmul --device cuda --kernel tile split stream staged --type $t --rows $1 \
      --cols $2 --tokens "${@:3}" -r 20 --json >> "$out/matmul.jsonl"
  done
done
kernels=(split,tile stream,staged stream)
for r in $(seq "$rounds"); do
  for i in 0 1 2; do
    k=${kernels[$(((i + r) % 3))]}  # the order rotates by round
    for m in "$big" "$small"; do
      CHUNKSERVE_CUDA_MATMUL=$k timeout 60 "$dev/chunkserve" bench model -m "$m" --device cuda -r 3 --json |
        sed "s/^/{\"kernel\": \"$k\", \"round\": $r} /" >> "$out/model.jsonl"
    done
    CHUNKSERVE_CUDA_MATMUL=$k timeout 60 "$dev/chunkserve" bench engine -m "$big" --device cuda --pp 4096 --tg 32 \
      --batch 32 2>&1 | tail -1 | sed "s/^/$k $r /" >> "$out/engine.md"
  done
done
# Where a step's time goes (--profile: each operation synchronized, no
# graphs), under the default and under stream,staged: the 1B file's single
# sequence and the shared-prompt batch.
for k in split,tile stream,staged; do
  echo "## $k" >> "$out/profile.md"
  CHUNKSERVE_CUDA_MATMUL=$k timeout 60 "$dev/chunkserve" bench model -m "$big" --device cuda --cuda-graphs off \
    -r 1 --profile >> "$out/profile.md" 2>&1
  CHUNKSERVE_CUDA_MATMUL=$k timeout 90 "$dev/chunkserve" bench engine -m "$big" --device cuda --pp 4096 --tg 32 \
    --batch 32 --cuda-graphs off --profile >> "$out/profile.md" 2>&1
done
python3 - "$out" <<'P'
import collections, json, sys
out = sys.argv[1]
def pairs(name):
    for line in open(f"{out}/{name}"):
        a, b = line.split("} ", 1)
        yield json.loads(a + "}"), json.loads(b)
us = collections.defaultdict(list)
for line in open(f"{out}/matmul.jsonl"):
    b = json.loads(line)
    us[(b["type"], b["rows"], b["cols"], b["tokens"], b["kernel"])].append((b["us"], b["weight_gbps"]))
names = ("tile", "split", "stream", "staged")
print("| type | rows x cols | tokens | " + " | ".join(f"{n} us (GB/s)" for n in names) + " |\n|---|---|---|---|---|---|---|")
for key in sorted({k[:4] for k in us}):
    cells = [" / ".join(f"{u:.1f} ({g:.0f})" for u, g in us[key + (k,)]) for k in names]
    print(f"| {key[0]} | {key[1]} x {key[2]} | {key[3]} | " + " | ".join(cells) + " |")
for a, b in pairs("model.jsonl"):
    busy = b.get("tg_device_ms_per_token", 0)
    print(a["kernel"], a["round"], b["model"], "pp512", b["pp_tps"], "tg128", b["tg_tps"],
          f"(device {busy:.3f} of {1e3 / b['tg_tps']:.3f} ms a token)")
P
cat "$out/engine.md"
