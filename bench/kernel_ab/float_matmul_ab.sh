#!/bin/bash
# In-process A/B of the CPU's float matmul: the previous kernel (an fp32 copy
# of the matrix) against the library's on the file's F16 values
# (float_matmul_ab.cpp), at 1 and 2 threads, after building build/.
#   bench/kernel_ab/float_matmul_ab.sh [rounds]
set -euo pipefail
root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
g++ -O3 -std=c++20 -fopenmp -mavx2 -mfma -mf16c -I "$root/src" "$root/bench/kernel_ab/float_matmul_ab.cpp" \
  "$root/build/libchunkserve_lib.a" -lpcre2-8 -o "$tmp/ab"
for threads in 1 2; do OMP_NUM_THREADS=$threads "$tmp/ab" "${1:-9}" | { [ $threads = 1 ] && cat || tail -n +3; }; done
