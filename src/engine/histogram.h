// A fixed-bucket histogram of durations (seconds), as Prometheus exposes them:
// counts per upper bound, their sum and count. Copyable, so a snapshot of the
// engine's carries it.
#pragma once
#include <cstdint>
#include <vector>

namespace cs {

struct Histogram {
  std::vector<double> bounds;    // ascending upper bounds
  std::vector<uint64_t> counts;  // per bound, then one more for values above the last
  double sum = 0;
  uint64_t count = 0;

  explicit Histogram(std::vector<double> b = {}) : bounds(std::move(b)), counts(bounds.size() + 1, 0) {}
  void observe(double v) {
    size_t i = 0;
    while (i < bounds.size() && v > bounds[i]) ++i;
    ++counts[i];
    sum += v;
    ++count;
  }
};

// Buckets for time to first token and for the time between tokens.
inline Histogram ttft_histogram() {
  return Histogram({0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160});
}
inline Histogram itl_histogram() {
  return Histogram({0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 1, 2.5});
}

}  // namespace cs
