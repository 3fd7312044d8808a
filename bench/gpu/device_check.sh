#!/usr/bin/env bash
# The GPU checks of the CUDA attention, as one run on the device machine
# (docs/benchmarks.md "GPU"): built here, packed with ../shared/device/pack.sh
# into .dev/ (chunkserve and unit_tests), then there:
#   bench/gpu/device_check.sh OUT_DIR [quick]
# 1. the GPU tests (unit_tests Cuda*/DeviceKvMemory*: attention, KV memory, the
# quantized matmul), 2. `chunkserve bench matmul --device cuda` and `bench
# attention --device cuda`, 3. PyTorch's attention on the same shapes
# (bench/peers/attention_torch.py), 4. compute-sanitizer's memcheck and
# racecheck over some of the tests (last: the slowest, and the first to go
# when a run is short of time).
# Each step has its own time limit and log; a failing step does not stop the
# later ones. Exit status: the tests'.
set -uo pipefail
out=${1:?usage: device_check.sh OUT_DIR [quick]}
quick=${2:-}
root=$(cd "$(dirname "$0")/../.." && pwd)
export LD_LIBRARY_PATH=$root/.dev/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PYTHONUNBUFFERED=1
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem,driver_version --format=csv | tee "$out/gpu.txt"
lscpu | grep -E "Model name|^CPU\(s\)" | tee -a "$out/gpu.txt"

timeout 130 "$root/.dev/unit_tests" --gtest_filter='CudaAttention.*:DeviceKvMemory.*:CudaMatmul.*' 2>&1 | tee "$out/tests.log"
tests=${PIPESTATUS[0]}
echo "tests: exit $tests"

# The quantized matmul on the GPU: decode's weight read (1 token) to prefill's
# products (512), a 1B-class FFN matrix, Q4_K and Q4_1.
for t in Q4_K Q4_1; do
  timeout 60 "$root/.dev/chunkserve" bench matmul --device cuda --type $t --rows 8192 --cols 2048 \
    --tokens 1 8 32 128 512 2>&1 | tee -a "$out/bench_matmul.log"
done
echo "bench matmul: exit ${PIPESTATUS[0]}"

args=(--json "$out/bench_attention_cuda.json")
[ -n "$quick" ] && args+=(--quick)
timeout 220 "$root/.dev/chunkserve" bench attention --device cuda "${args[@]}" 2>&1 | tee "$out/bench.log"
echo "bench: exit ${PIPESTATUS[0]}"

pargs=(--json "$out/attention_torch.json")
[ -n "$quick" ] && pargs+=(--quick)
timeout 130 python3 "$root/bench/peers/attention_torch.py" "${pargs[@]}" 2>&1 | tee "$out/torch.log"
echo "torch: exit ${PIPESTATUS[0]}"
if command -v compute-sanitizer >/dev/null; then
  timeout 70 compute-sanitizer --tool memcheck --error-exitcode 9 "$root/.dev/unit_tests" \
    --gtest_filter='CudaAttention.LargeBatches:CudaAttention.LongWalks*:DeviceKvMemory.CopiesMatchTheHostMemory:CudaMatmul.*' 2>&1 | tail -30 | tee "$out/memcheck.log"
  echo "memcheck: exit ${PIPESTATUS[0]}"
  timeout 60 compute-sanitizer --tool racecheck --error-exitcode 9 "$root/.dev/unit_tests" \
    --gtest_filter='CudaAttention.LargeBatches' 2>&1 | tail -8 | tee "$out/racecheck.log"
  echo "racecheck: exit ${PIPESTATUS[0]}"
fi

exit "$tests"
