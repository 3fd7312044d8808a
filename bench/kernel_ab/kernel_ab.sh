#!/bin/bash
# In-process A/B of the attention kernel: the kernel and attention.cpp
# at git revision REV (A) and in the working tree (B) are compiled into one
# binary and timed in interleaved rounds, so both see the same machine noise.
# Prints the best time of each as a fraction of the best FMA probe, B/A of the
# best times and the median of the rounds' B/A.
#   [ISA=avx2|avx512] [CASES=substring] bench/kernel_ab/kernel_ab.sh REV [rounds]   (after building build/)
# ISA picks the kernel compared (default: AVX-512 when the CPU has it, else AVX2);
# CASES="a|b" keeps only the cases whose names contain a or b.
# Knock-out runs: edit the working tree (e.g. skip softmax_rows) and compare to HEAD.
set -euo pipefail
rev=${1:?usage: kernel_ab.sh REV [rounds]}
rounds=${2:-10}
root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
isa=${ISA:-$(grep -qw avx512f /proc/cpuinfo && echo avx512 || echo avx2)}
case $isa in
  avx512) ops=Ops512; flags="-mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mavx512bf16" ;;
  avx2) ops=Ops256; flags="-mavx2 -mfma -mf16c" ;;
  *) echo "ISA must be avx2 or avx512" >&2; exit 2 ;;
esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for v in A B; do
  mkdir -p "$tmp/$v/attn"
  for f in block_$isa.cpp block_impl.h exp_impl.h attention.cpp; do
    if [ $v = A ]; then git -C "$root" show "$rev:src/attn/$f" > "$tmp/$v/attn/$f"
    else cp "$root/src/attn/$f" "$tmp/$v/attn/$f"; fi
  done
  mv "$tmp/$v/attn/block_$isa.cpp" "$tmp/$v/attn/block_kernel.cpp"
  # The copies live in namespace A or B: drop the kernel's exported wrapper and
  # route attention.cpp's block_update calls to this variant's kernel.
  python3 - "$tmp/$v/attn" <<'P'
import sys
d = sys.argv[1]
k = open(d + '/block_kernel.cpp').read()
# Include this variant's own kernel headers, not the working tree's via -I.
k = k.replace('#include "attn/block_impl.h"', '#include "block_impl.h"').replace('#include "attn/exp_impl.h"', '#include "exp_impl.h"')
open(d + '/block_kernel.cpp', 'w').write(k[:k.rfind('namespace cs {')])
a = open(d + '/attention.cpp').read()
a = a.replace('namespace cs {\nnamespace {', 'namespace cs {\nusing namespace ::cs;\nvoid kernel(const BlockJob& j);\nnamespace {', 1)
a = a.replace('block_update(j);', 'kernel(j);').replace('return attn_per_sequence(p);', 'return cs::attn_per_sequence(p);')
open(d + '/attention.cpp', 'w').write(a)
P
done
g++ -O3 -std=c++20 -fopenmp -I "$root/src" -I "$root/bench" -I "$tmp" \
  $flags -DOPS=$ops -Wno-maybe-uninitialized -Wno-uninitialized \
  "$root/bench/kernel_ab/kernel_ab.cpp" "$root/src/cli/roofline.cpp" "$root/build/libchunkserve_lib.a" -lpcre2-8 \
  -o "$tmp/kernel_ab"
echo "kernel: $isa"
"$tmp/kernel_ab" "$rounds"
