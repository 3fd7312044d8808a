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

// fp32 FMA throughput of one short probe (all threads, `iters` x 12 FMAs per
// thread, about iters / 1e5 ms): read right next to a kernel's timing it
// says what the cores could do at that moment.
double fma_probe_gflops(long iters);

}  // namespace cs
