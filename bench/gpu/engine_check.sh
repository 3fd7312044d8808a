#!/usr/bin/env bash
# Issue 45's checks of the engine on the GPU (--device cuda), as one run on
# the device machine (../shared/device/README.md). Prepared here:
#   cmake --build build && ../shared/device/pack.sh .dev build/chunkserve \
#     build/tests/unit_tests build/tests/model_tests && strip .dev/chunkserve .dev/*_tests
#   .dev/llama/: llama-quantize and its libraries (build_llama_cpp.sh's bin/);
#   .dev/vocab/: ggml-vocab-llama-bpe.gguf (or .xz); .dev/whl/: PyPI's gguf wheel
#   (bench/gpu/make_model.sh makes the files there)
# There:  bench/gpu/engine_check.sh OUT_DIR [1b]
# 1. the GPU tests of the layer steps, the head, the forward pass, the KV on
#    the device and the engine there (unit_tests CudaOps.*, CudaMatmul.*,
#    CudaEngine.*: tiny models);
# 2. a small quantized model made there (make_synthetic.py llama3, Q4_K_M):
#    the perplexity test on it and on its F16 source, then model_tests
#    CudaModel.* on it (the GPU's logits are the CPU's bit for bit with the
#    KV on the host; with it on the GPU every mode and batch gives the same
#    tokens), and `generate` on both devices;
# 3. `bench model` on both devices, on the GPU with CUDA graphs and without
#    (and a profile); with `1b`, the 1B-class file of make_1b.sh too (graphs
#    on, off, on), and `bench engine --pp 4096 --tg 32 --batch 32` on the GPU;
# 4. compute-sanitizer's memcheck over the CudaOps tests.
# Each step has its own time limit and log; a failing step does not stop the
# later ones. Exit status: the tests'.
set -uo pipefail
out=${1:?usage: engine_check.sh OUT_DIR [1b]}
big=${2:-}
root=$(cd "$(dirname "$0")/../.." && pwd)
dev=$root/.dev
export LD_LIBRARY_PATH=$dev/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv | tee "$out/gpu.txt"

timeout 150 "$dev/unit_tests" --gtest_filter='CudaOps.*:CudaMatmul.*:CudaEngine.*' 2>&1 | tee "$out/unit.log"
status=${PIPESTATUS[0]}
echo "unit tests: exit $status"

models=/tmp/models
small=$models/llama3-small-Q4_K_M.gguf
KEEP_F16=1 timeout 150 "$root/bench/gpu/make_model.sh" llama3 "$small" "$out/make.log"

# The perplexity test alone first (a fresh process), on the F16 file too
# (no 8-bit activations there to magnify the attention's roundings), then
# all of them.
for f in "$small" "$small.f16"; do
  log="$out/model_ppl$([ "$f" = "$small" ] || echo _f16).log"
  CS_GPU_TEST_MODEL=$f timeout 120 "$dev/model_tests" --gtest_filter='CudaModel.Perplexity*' 2>&1 | tee "$log"
  st=${PIPESTATUS[0]}
  echo "perplexity test, $(basename "$f"): exit $st"
  [ "$st" -ne 0 ] && status=$st
done
CS_GPU_TEST_MODEL=$small timeout 240 "$dev/model_tests" --gtest_filter='CudaModel.*' 2>&1 | tee "$out/model.log"
st=${PIPESTATUS[0]}
echo "model tests: exit $st"
[ "$st" -ne 0 ] && status=$st

for d in cpu cuda; do
  timeout 60 "$dev/chunkserve" generate -m "$small" --device $d -p "The capital of France is" -n 24 \
    > "$out/generate_$d.txt" 2> "$out/generate_$d.err"
  echo "generate --device $d: exit $?"
done
cmp "$out/generate_cpu.txt" "$out/generate_cuda.txt" && echo "generate: the same text on both devices"

for d in cpu cuda; do
  timeout 60 "$dev/chunkserve" perplexity -m "$small" --device $d -f "$root/tests/data/perplexity_text.md" --ctx 128 \
    --chunks 8 --json 2>/dev/null | tee -a "$out/perplexity.jsonl"
done
# Decode with CUDA graphs (the default) and without, then where a step's
# time goes (--profile: each operation synchronized, so no graphs).
for run in "--device cuda" "--device cuda --cuda-graphs off" "--device cpu" "--device cuda --cuda-graphs off --profile"; do
  echo "## bench model $run" >> "$out/bench_model_small.md"
  timeout 90 "$dev/chunkserve" bench model -m "$small" $run -r 3 2>&1 | tee -a "$out/bench_model_small.md"
done

if [ "$big" = 1b ]; then
  model=$models/llama3-1b-Q4_K_M.gguf
  timeout 180 "$root/bench/gpu/make_model.sh" llama3-1b "$model" "$out/make.log"
  for g in on off on; do
    timeout 90 "$dev/chunkserve" bench model -m "$model" --device cuda --cuda-graphs $g -r 3 2>&1 |
      tee -a "$out/bench_model_1b.md"
  done
  timeout 150 "$dev/chunkserve" bench engine -m "$model" --device cuda --pp 4096 --tg 32 --batch 32 2>&1 |
    tee "$out/bench_engine_1b.md"
fi
if command -v compute-sanitizer >/dev/null; then
  timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 "$dev/unit_tests" --gtest_filter='CudaOps.*' 2>&1 |
    tail -20 | tee "$out/memcheck.log"
  echo "memcheck: exit ${PIPESTATUS[0]}"
fi
exit "$status"
