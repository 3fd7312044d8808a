#include "base/threads.h"

#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace cs {

int cores_available() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? int(n) : 1;
}

int thread_cap(int requested) {
  const int cores = cores_available();
  return requested <= 0 ? cores : std::min(requested, cores);
}

ThreadBudget::ThreadBudget(int max_threads, std::chrono::milliseconds interval)
    : max_(thread_cap(max_threads)), threads_(max_), interval_(interval), last_(sample()) {}

ThreadBudget::Sample ThreadBudget::sample() {
  Sample s;
  s.wall = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  s.busy_self = double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + 1e-6 * double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
  FILE* f = std::fopen("/proc/stat", "r");
  if (!f) return s;
  // cpu  user nice system idle iowait irq softirq steal ...
  unsigned long long v[8] = {};
  const int n = std::fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4],
                            &v[5], &v[6], &v[7]);
  std::fclose(f);
  if (n < 7) return s;
  // Busy = user + nice + system + irq + softirq; idle, iowait and steal are
  // time no process of this machine ran.
  const double hz = double(sysconf(_SC_CLK_TCK));
  s.busy_all = double(v[0] + v[1] + v[2] + v[5] + v[6]) / hz;
  s.ok = true;
  return s;
}

int ThreadBudget::update() {
  if (max_ <= 1) return threads_;
  // The clock first: sampling reads /proc/stat (~80 us), once per interval,
  // not once per step (a decode step of a small model takes ~5 ms).
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  if ((wall - last_.wall) * 1000 < double(interval_.count())) return threads_;
  const Sample now = sample();
  const double dt = now.wall - last_.wall;
  if (now.ok && last_.ok && dt > 0) {
    const double others = std::max(0.0, (now.busy_all - last_.busy_all) - (now.busy_self - last_.busy_self)) / dt;
    // Cores other processes kept busy, rounded: background noise of a few
    // per cent does not count; one busy process does.
    const int busy = int(std::floor(others + 0.5));
    threads_ = std::clamp(cores_available() - busy, 1, max_);
  }
  last_ = now;
  return threads_;
}

}  // namespace cs
