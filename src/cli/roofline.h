// Measures this machine's roofline at start of a benchmark: memory read
// bandwidth (GB/s, all threads streaming a buffer much larger than the caches)
// and fp32 FMA throughput (GFLOP/s, all threads, register-resident FMAs at
// the widest vector width the CPU has).
#pragma once

namespace cs {

struct Roofline {
  double read_gbs = 0;
  double fp32_gflops = 0;
};

Roofline measure_roofline();

}  // namespace cs
