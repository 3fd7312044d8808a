// Which SIMD level the kernels run at. Detected once from the CPU; the
// environment variable CHUNKSERVE_ISA=scalar|avx2|avx512 lowers it (never
// raises it past what the CPU has) so tests can exercise every path.
#pragma once

namespace cs {

enum class Isa { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

// AVX-512 here means F+BW+VL+VNNI (the int8 dot products the kernels use).
Isa cpu_isa();
const char* isa_name(Isa isa);

// For tests: force a level for the rest of the process (clamped to the CPU's).
void set_isa_for_testing(Isa isa);

}  // namespace cs
