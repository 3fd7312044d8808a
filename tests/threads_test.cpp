#include "base/threads.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace cs {
namespace {

TEST(Threads, CountsAreCappedAtTheAvailableCores) {
  const int cores = cores_available();
  ASSERT_GE(cores, 1);
  EXPECT_EQ(thread_cap(0), cores);
  EXPECT_EQ(thread_cap(-3), cores);
  EXPECT_EQ(thread_cap(1), 1);
  EXPECT_EQ(thread_cap(1000), cores);
}

// The budget never leaves [1, max], whatever the machine is doing; with a
// thread of this process busy it does not count that as another process.
TEST(Threads, BudgetStaysWithinItsBounds) {
  ThreadBudget b(1000, std::chrono::milliseconds(20));
  EXPECT_EQ(b.max(), cores_available());
  EXPECT_EQ(b.threads(), b.max());
  std::atomic<bool> stop{false};
  std::thread spin([&] {
    while (!stop) {
    }
  });
  for (int i = 0; i < 5; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    const int t = b.update();
    EXPECT_GE(t, 1);
    EXPECT_LE(t, b.max());
  }
  stop = true;
  spin.join();
  ThreadBudget one(1);
  EXPECT_EQ(one.update(), 1);
}

}  // namespace
}  // namespace cs
