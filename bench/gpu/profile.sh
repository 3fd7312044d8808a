#!/usr/bin/env bash
# Nsight Compute on the attention kernels, for where their time goes (run on
# the device machine after device_check.sh's packing: .dev/chunkserve):
#   bench/gpu/profile.sh OUT_DIR
# 1. the chunk-first tiles of TPP at n_p = n_s = 4096 (one wave of 32-row
#    tiles), 2. its merge launch, 3. the per-sequence tiles at n_p = 1024,
#    n_s = 0 (many waves of 1-row tiles). b = 32, h = 32, d = 128, fp16.
# Nsight replays each kernel with caches flushed and clocks at base: read its
# ratios (throughput against peak, stall reasons), not its times.
set -uo pipefail
out=${1:?usage: profile.sh OUT_DIR}
root=$(cd "$(dirname "$0")/../.." && pwd)
export LD_LIBRARY_PATH=$root/.dev/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
mkdir -p "$out"
command -v ncu >/dev/null || { echo "profile: no ncu here"; exit 0; }
sections=(--section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats
          --section WarpStateStats --section SchedulerStats)
cs=("$root/.dev/chunkserve" bench attention --device cuda --table3-only --reps 1)
prof() {  # name, ncu selection..., -- chunkserve arguments...
  local name=$1; shift
  local sel=()
  while [ "$1" != "--" ]; do sel+=("$1"); shift; done
  shift
  timeout 120 ncu --kernel-name-base mangled "${sel[@]}" --launch-count 1 "${sections[@]}" "${cs[@]}" "$@" \
    > "$out/$name.txt" 2>&1
  echo "$name: exit $?"
  grep -E "Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit|Warp Cycles Per Issued|No Eligible|Stall|One or More Eligible" "$out/$name.txt" | head -30
}
# The first launch of each kind: warm-ups run per-sequence alone, per-sequence
# shared, TPP, relay in that order (merges: one per call with parts).
prof tpp_tiles_4096 --kernel-name 'regex:attn_tiles.*Li2ELi3E' -- --np 4096 --shared 4
prof tpp_merge_4096 --kernel-name regex:merge_parts --launch-skip 2 -- --np 4096 --shared 4
prof per_seq_tiles_1024 --kernel-name 'regex:attn_tiles.*Li1ELi2E' -- --np 1024 --shared 0
