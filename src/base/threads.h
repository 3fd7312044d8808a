// How many compute threads to use. OpenMP workers spin at every barrier, so a
// thread count above the cores that are actually free makes each parallel
// step wait for a worker the OS has descheduled: decode on a 2-core machine
// slows several times over with one busy process beside it, and more with
// more threads than cores (docs/benchmarks.md, "Threads beside a busy
// process"). So: never more threads than the cores this process may run on,
// and fewer while other processes keep cores busy.
#pragma once
#include <chrono>
#include <cstdint>

namespace cs {

// CPUs this process may run on (its affinity mask).
int cores_available();

// The thread count for `requested` (0 = all available cores), capped at the
// available cores.
int thread_cap(int requested);

// Watches the machine's load: every `interval`, how much CPU time other
// processes took (all CPUs' busy time from /proc/stat, minus this process's
// own). threads() is `max` less the cores they kept busy, at least 1. Thread
// counts change no result (the kernels' bits do not depend on them).
class ThreadBudget {
 public:
  explicit ThreadBudget(int max_threads, std::chrono::milliseconds interval = std::chrono::milliseconds(500));
  // Samples the load if `interval` has passed; the threads for the next step.
  int update();
  int threads() const { return threads_; }
  int max() const { return max_; }

 private:
  struct Sample {
    double wall = 0, busy_all = 0, busy_self = 0;  // seconds
    bool ok = false;
  };
  static Sample sample();

  int max_;
  int threads_;
  std::chrono::milliseconds interval_;
  Sample last_;
};

}  // namespace cs
