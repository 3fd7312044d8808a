#!/usr/bin/env bash
# Issue 46's measurement on the lent machine's 16-core CPU, as one run
# (../shared/device/README.md): makes the 1B-class model there
# (make_synthetic.py llama3-1b + llama-quantize Q4_K_M) and runs
# bench/peers/scaling.sh on it. Prepared here:
#   ../shared/device/pack.sh .dev build/chunkserve
#   .dev/llama/: llama-bench, llama-batched-bench, llama-quantize and their
#     libraries from build_llama_cpp.sh's bin/; .dev/vocab/: the llama-bpe
#     vocabulary; .dev/whl/: PyPI's gguf wheel (pip download --no-deps gguf)
# There:  bench/peers/device_scaling.sh OUT   (THREADS, REPS, ... as scaling.sh)
# EXTRA_ENV="VAR=VALUE ..." also times 16-thread pp/tg with those variables
# (e.g. OpenMP's OMP_PROC_BIND=close OMP_PLACES=cores) beside the default,
# alternating, 2 rounds: OUT/extra.jsonl. BASELINE=.dev/chunkserve_before
# (another build of chunkserve, packed beside the first: an earlier commit)
# likewise times that binary beside .dev/chunkserve: OUT/baseline.jsonl.
set -uo pipefail
out=${1:?usage: device_scaling.sh OUT_DIR}
root=$(cd "$(dirname "$0")/../.." && pwd)
dev=$root/.dev
mkdir -p "$out"
export LD_LIBRARY_PATH=$dev/lib
lscpu | grep -E "Model name|^CPU\(s\)|Thread|NUMA node|L3" | tee "$out/cpu.txt"
model=/tmp/models/llama3-1b-Q4_K_M.gguf
t0=$(date +%s)
"$root/bench/gpu/make_model.sh" llama3-1b "$model" "$out/make.log" || exit 1
echo "model made in $(( $(date +%s) - t0 )) s: $(du -h "$model" | cut -f1)"
MODEL=$model CHUNKSERVE=$dev/chunkserve LLAMA_BIN=$dev/llama "$root/bench/peers/scaling.sh" "$out" 2>&1 | tee "$out/scaling.md"
# 16-thread pp512 and tg128 of a variant beside the default, alternating, 2
# rounds, one JSON line each into $1; $2 names the variant, $3 its
# environment, $4 its binary.
beside() {
  local file=$1 r variant env bin
  shift
  for r in 1 2; do
    for variant in default "$1"; do
      if [ "$variant" = default ]; then env=(); bin=$dev/chunkserve; else read -r -a env <<< "$2"; bin=$3; fi
      echo "{\"variant\": \"$variant\", \"env\": \"${env[*]}\", \"binary\": \"$(basename "$bin")\", \"round\": $r, \"result\": $(env "${env[@]}" \
        "$bin" bench model -m "$model" -t 16 -p 512 -n 128 -r 3 --profile --json)}" >> "$file"
    done
  done
}
[ -n "${EXTRA_ENV:-}" ] && beside "$out/extra.jsonl" extra "$EXTRA_ENV" "$dev/chunkserve"
[ -n "${BASELINE:-}" ] && beside "$out/baseline.jsonl" baseline "" "$BASELINE"
exit 0
