#!/bin/bash
# In-process A/B of the AVX2 integer kernels on repacked weights: the kernels
# of model/qdot_avx2.cpp at git revision REV (A) and in the working tree (B),
# compiled into one binary (qdot_ab.cpp) and timed in interleaved rounds on
# matrices that stream from memory, at 1 and 2 threads (after building build/).
#   bench/kernel_ab/qdot_ab.sh REV [rounds]
set -euo pipefail
rev=${1:?usage: qdot_ab.sh REV [rounds]}
root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for v in A B; do
  mkdir -p "$tmp/$v"
  for f in qdot_avx2.cpp qdot_impl.h; do
    if [ $v = A ]; then git -C "$root" show "$rev:src/model/$f" > "$tmp/$v/$f"
    else cp "$root/src/model/$f" "$tmp/$v/$f"; fi
  done
  # Each variant in a namespace of its own: its own kernel header, and the
  # exported functions renamed and kept out of namespace cs.
  python3 - "$tmp/$v" "$v" <<'P'
import sys
d, v = sys.argv[1], sys.argv[2]
k = open(d + '/qdot_avx2.cpp').read().replace('#include "model/qdot_impl.h"', '#include "qdot_impl.h"')
tail = k.rfind('namespace cs {')
k = k[:tail] + 'namespace exported {\nusing namespace ::cs;\n' + k[tail + len('namespace cs {'):]
open(d + '/qdot_avx2.cpp', 'w').write(k)
open(d + '/variant.cpp', 'w').write(f'''#include <immintrin.h>
#include "model/ggml_types.h"
#include "model/matmul.h"
#include "model/pack_layout.h"
namespace {v} {{
#include "qdot_avx2.cpp"
void qdot16(const uint32_t* g, int nb, int nr, const cs::BlockQ8* a, int nt, float* y, int ldy) {{
  exported::qdot16_avx2(g, nb, nr, a, nt, y, ldy);
}}
void qdot16q8(cs::PackLayout l, const uint32_t* g, int nb, int nr, const cs::BlockQ8* a, int nt, float* y, int ldy) {{
  exported::qdot16q8_avx2(l, g, nb, nr, a, nt, y, ldy);
}}
}}
''')
P
done
cat > "$tmp/qdot_ab_variants.h" <<'H'
#include <cstdint>
#include "model/matmul.h"
#include "model/pack_layout.h"
namespace A {
void qdot16(const uint32_t*, int, int, const cs::BlockQ8*, int, float*, int);
void qdot16q8(cs::PackLayout, const uint32_t*, int, int, const cs::BlockQ8*, int, float*, int);
}
namespace B {
void qdot16(const uint32_t*, int, int, const cs::BlockQ8*, int, float*, int);
void qdot16q8(cs::PackLayout, const uint32_t*, int, int, const cs::BlockQ8*, int, float*, int);
}
H
flags=(-O3 -std=c++20 -fopenmp -mavx2 -mfma -mf16c -I "$root/src" -I "$tmp")
g++ "${flags[@]}" -c "$tmp/A/variant.cpp" -I "$tmp/A" -o "$tmp/a.o"
g++ "${flags[@]}" -c "$tmp/B/variant.cpp" -I "$tmp/B" -o "$tmp/b.o"
g++ "${flags[@]}" "$root/bench/kernel_ab/qdot_ab.cpp" "$tmp/a.o" "$tmp/b.o" "$root/build/libchunkserve_lib.a" \
  -lpcre2-8 -o "$tmp/ab"
for threads in 1 2; do OMP_NUM_THREADS=$threads "$tmp/ab" "${2:-9}"; echo; done
