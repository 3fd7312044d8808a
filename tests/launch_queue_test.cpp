// base/launch_queue.h: when launches go one by one, as a graph built,
// replayed or updated, and that whatever way they go the device sees every
// recorded launch, in order, with its own arguments. The executor here keeps
// a log of what "ran" (a graph keeps its own copy of its launches and
// arguments, as a CUDA graph does).
#include "base/launch_queue.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"

namespace cs::cuda {
namespace {

void k_add(int*, int) {}
void k_scale(float*, double, char) {}
void k_other(int*, int) {}

struct Ran {
  const void* func;
  Dim3 grid;
  std::vector<uint8_t> args;
  bool operator==(const Ran& o) const { return func == o.func && grid == o.grid && args == o.args; }
};

Ran ran_of(const Launch& l, const uint8_t* arena) {
  return {l.func, l.grid, std::vector<uint8_t>(arena + l.args_at, arena + l.args_at + l.args_bytes)};
}

class LogExecutor final : public LaunchExecutor {
 public:
  void launch(const Launch* ls, size_t n, const uint8_t* arena) override {
    if (fail_next) {
      fail_next = false;
      throw Error("launch failed");
    }
    ++direct_calls;
    for (size_t i = 0; i < n; ++i) log.push_back(ran_of(ls[i], arena));
  }
  void* build(const Launch* ls, size_t n, const uint8_t* arena) override {
    ++built;
    auto* g = new std::vector<Ran>;
    for (size_t i = 0; i < n; ++i) g->push_back(ran_of(ls[i], arena));
    ++alive;
    return g;
  }
  bool update(void* graph, const Launch* ls, size_t n, const uint8_t* arena) override {
    if (refuse_updates) return false;
    ++updated;
    auto& g = *static_cast<std::vector<Ran>*>(graph);
    EXPECT_EQ(g.size(), n);
    for (size_t i = 0; i < n; ++i) {
      EXPECT_EQ(g[i].func, ls[i].func);
      g[i] = ran_of(ls[i], arena);
    }
    return true;
  }
  void replay(void* graph) override {
    ++replayed;
    for (const Ran& r : *static_cast<std::vector<Ran>*>(graph)) log.push_back(r);
  }
  void destroy(void* graph) override {
    if (!graph) return;
    --alive;
    delete static_cast<std::vector<Ran>*>(graph);
  }

  std::vector<Ran> log;
  int direct_calls = 0, built = 0, updated = 0, replayed = 0, alive = 0;
  bool refuse_updates = false, fail_next = false;
};

// Records kernel(args...) as base/cuda.h's launch() would, and notes what
// the device must see.
struct Recorder {
  LaunchQueue& q;
  std::vector<Ran>& expected;
  template <class... P>
  void add(void (*kernel)(P...), unsigned grid, P... args) {
    Launch l;
    l.func = reinterpret_cast<const void*>(kernel);
    l.grid = {grid, 1, 1};
    l.block = {128, 1, 1};
    const void* values[] = {&args...};
    const uint32_t sizes[] = {uint32_t(sizeof(P))...}, aligns[] = {uint32_t(alignof(P))...};
    // The bytes as laid out by alignment (padding zero).
    std::vector<uint8_t> bytes;
    size_t at = 0;
    for (size_t i = 0; i < sizeof...(P); ++i) {
      at = (at + aligns[i] - 1) / aligns[i] * aligns[i];
      bytes.resize(at + sizes[i], 0);
      std::memcpy(bytes.data() + at, values[i], sizes[i]);
      at += sizes[i];
    }
    expected.push_back({l.func, l.grid, bytes});
    q.add(l, values, sizes, aligns, sizeof...(P));
  }
};

// A queue on a logging executor, and what its device must see.
class LaunchQueueTest : public ::testing::Test {
 protected:
  LogExecutor ex;
  LaunchQueue q{ex};
  std::vector<Ran> expected;
  Recorder r{q, expected};
};

TEST_F(LaunchQueueTest, ArgumentsAreLaidOutByTheirAlignment) {
  float x = 0;
  r.add(k_scale, 3, &x, 2.5, 'c');
  q.flush();
  ASSERT_EQ(ex.log.size(), 1u);
  const std::vector<uint8_t>& a = ex.log[0].args;
  ASSERT_EQ(a.size(), 17u);  // a pointer at 0, a double at 8, a char at 16
  float* p;
  double d;
  std::memcpy(&p, a.data(), 8), std::memcpy(&d, a.data() + 8, 8);
  EXPECT_EQ(p, &x);
  EXPECT_EQ(d, 2.5);
  EXPECT_EQ(char(a[16]), 'c');
  EXPECT_EQ(ex.log, expected);
}

TEST_F(LaunchQueueTest, ASequenceGoesOneByOneThenAsAGraphThenReplayed) {
  int buf[4];
  auto step = [&](int v) {
    r.add(k_add, 1, buf, v);
    r.add(k_other, 2, buf + 1, v);
    r.add(k_add, 1, buf + 2, 7);
    q.flush();
  };
  step(1);  // first seen: one by one
  EXPECT_EQ(ex.direct_calls, 1);
  EXPECT_EQ(ex.built, 0);
  step(1);  // again: a graph
  EXPECT_EQ(ex.built, 1);
  EXPECT_EQ(ex.replayed, 1);
  step(1);  // the same launches: replayed as they are
  EXPECT_EQ(ex.built, 1);
  EXPECT_EQ(ex.updated, 0);
  EXPECT_EQ(ex.replayed, 2);
  const LaunchStats before_update = q.stats();
  step(2);  // other arguments: the graph updated
  EXPECT_EQ(ex.updated, 1);
  EXPECT_EQ(ex.replayed, 3);
  const LaunchStats update = q.stats() - before_update;
  EXPECT_EQ(update.launches, 3u);
  EXPECT_EQ(update.flushes, 1u);
  EXPECT_EQ(update.updates, 1u);
  EXPECT_EQ(update.replays + update.builds + update.direct, 0u);
  step(2);
  EXPECT_EQ(ex.updated, 1);
  EXPECT_EQ(ex.replayed, 4);
  EXPECT_EQ(ex.log, expected);
  const LaunchStats& s = q.stats();
  EXPECT_EQ(s.launches, 15u);
  EXPECT_EQ(s.flushes, 5u);
  EXPECT_EQ(s.direct, 1u);
  EXPECT_EQ(s.builds, 1u);
  EXPECT_EQ(s.updates, 1u);
  EXPECT_EQ(s.replays, 2u);
}

// Runs of the same kernels with arguments of their own that come back step
// after step (each layer's run where a host KV store cuts them apart): each
// gets a graph of its own, and from the third step on all are replayed.
TEST_F(LaunchQueueTest, RecurringArgumentsGetGraphsOfTheirOwn) {
  int buf[16];
  const int layers = 16;
  for (int step = 0; step < 4; ++step) {
    const int built = ex.built, replayed = ex.replayed;
    for (int layer = 0; layer < layers; ++layer) {
      for (int i = 0; i < 4; ++i) r.add(k_add, 1, buf + layer, i);
      q.flush();
    }
    if (step == 1) {
      EXPECT_EQ(ex.built - built, layers - 1);  // the last layer's graph was made in step 0
    }
    if (step >= 2) {
      EXPECT_EQ(ex.built, built);
      EXPECT_EQ(ex.replayed - replayed, layers);
    }
  }
  EXPECT_EQ(ex.alive, layers);
  EXPECT_EQ(ex.log, expected);
}

TEST_F(LaunchQueueTest, ShortGroupsAndGraphsOffGoOneByOne) {
  int buf[2];
  for (int i = 0; i < 3; ++i) {
    r.add(k_add, 1, buf, i);
    r.add(k_add, 1, buf, i);  // below kMinGraph
    q.flush();
  }
  EXPECT_EQ(ex.built, 0);
  EXPECT_EQ(ex.direct_calls, 3);
  q.set_graphs(false);
  for (int i = 0; i < 3; ++i) {
    r.add(k_add, 1, buf, i);
    EXPECT_EQ(q.pending(), 0u);  // sent at once
  }
  EXPECT_EQ(ex.direct_calls, 6);
  EXPECT_EQ(ex.built, 0);
  EXPECT_EQ(ex.log, expected);
}

TEST_F(LaunchQueueTest, AnUpdateRefusedRebuildsAndFailuresAreNotSentTwice) {
  int buf[4];
  auto step = [&](int v) {
    for (int i = 0; i < 4; ++i) r.add(k_add, 1, buf + i, v);
    q.flush();
  };
  step(0), step(0);
  ex.refuse_updates = true;
  step(1);
  EXPECT_EQ(ex.built, 2);  // destroyed and made again
  EXPECT_EQ(ex.alive, 1);
  EXPECT_EQ(ex.log, expected);

  // A launch group whose sending throws is dropped, not sent again later.
  r.add(k_add, 9, buf, 1);
  ex.fail_next = true;
  EXPECT_THROW(q.flush(), Error);
  expected.pop_back();
  EXPECT_EQ(q.pending(), 0u);
  q.flush();
  EXPECT_EQ(ex.log, expected);
}

TEST(LaunchQueue, KeepsAtMostItsLimitOfGraphs) {
  LogExecutor ex;
  {
    LaunchQueue q(ex);
    std::vector<Ran> expected;
    Recorder r{q, expected};
    int buf[1];
    // Shapes differ by the number of launches: each seen twice.
    const int shapes = int(LaunchQueue::kMaxGraphs) + 5;
    for (int pass = 0; pass < 2; ++pass)
      for (int s = 0; s < shapes; ++s) {
        for (int i = 0; i < int(LaunchQueue::kMinGraph) + s; ++i) r.add(k_add, 1, buf, i);
        q.flush();
      }
    EXPECT_EQ(ex.built, shapes);
    EXPECT_EQ(ex.alive, int(LaunchQueue::kMaxGraphs));
    EXPECT_EQ(ex.log, expected);
  }
  EXPECT_EQ(ex.alive, 0);  // the queue's end destroys them
}

// Random groups of launches from a few kernel sequences, with arguments and
// grids that change now and then: whatever the queue does, the log is every
// launch in the order recorded.
TEST(LaunchQueue, RandomGroupsRunEveryLaunchInOrder) {
  std::mt19937 rng(17);
  for (int trial = 0; trial < 20; ++trial) {
    LogExecutor ex;
    LaunchQueue q(ex);
    std::vector<Ran> expected;
    Recorder r{q, expected};
    int buf[8];
    float fb[2];
    for (int g = 0; g < 200; ++g) {
      const int kind = int(rng() % 4), n = 1 + kind * 3;
      const int arg = rng() % 3 == 0 ? int(rng() % 4) : 0;
      for (int i = 0; i < n; ++i) {
        if (i % 3 == 2) r.add(k_scale, 1 + unsigned(rng() % 5 == 0), fb, double(arg), char('a' + i));
        else if (kind == 2 && i == 0) r.add(k_other, 4, buf + i % 8, arg);
        else r.add(k_add, 2, buf + i % 8, arg + i);
      }
      if (rng() % 7 == 0) q.set_graphs(rng() % 2 == 0);
      q.flush();
    }
    ASSERT_EQ(ex.log, expected) << "trial " << trial;
    EXPECT_GT(ex.replayed, 0);
    EXPECT_GT(ex.updated, 0);
    EXPECT_GT(ex.built, 0);
  }
}

}  // namespace
}  // namespace cs::cuda
