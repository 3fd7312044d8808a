#include "base/cpu.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace cs {
namespace {

Isa detect() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni"))
    return Isa::kAvx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("f16c"))
    return Isa::kAvx2;
  return Isa::kScalar;
}

Isa hardware() {
  static const Isa isa = detect();
  return isa;
}

Isa from_env() {
  Isa isa = hardware();
  if (const char* e = std::getenv("CHUNKSERVE_ISA")) {
    Isa want = isa;
    if (!std::strcmp(e, "scalar")) want = Isa::kScalar;
    if (!std::strcmp(e, "avx2")) want = Isa::kAvx2;
    if (!std::strcmp(e, "avx512")) want = Isa::kAvx512;
    if (int(want) < int(isa)) isa = want;
  }
  return isa;
}

std::atomic<int>& current() {
  static std::atomic<int> isa{int(from_env())};
  return isa;
}

}  // namespace

Isa cpu_isa() { return Isa(current().load(std::memory_order_relaxed)); }

void set_isa_for_testing(Isa isa) {
  if (int(isa) > int(hardware())) isa = hardware();
  current().store(int(isa));
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx2: return "avx2";
    default: return "scalar";
  }
}

}  // namespace cs
