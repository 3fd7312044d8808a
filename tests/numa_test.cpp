#include "base/numa.h"

#include <gtest/gtest.h>
#include <linux/mempolicy.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/huge_pages.h"

namespace cs {
namespace {

TEST(Numa, NodeListsAreReadInTheKernelsFormat) {
  EXPECT_EQ(parse_numa_nodes("0\n"), std::vector<int>{0});
  EXPECT_EQ(parse_numa_nodes("0-3"), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(parse_numa_nodes("0-1,4-5\n"), (std::vector<int>{0, 1, 4, 5}));
  EXPECT_EQ(parse_numa_nodes("2,7"), (std::vector<int>{2, 7}));
  EXPECT_EQ(parse_numa_nodes("0,\n"), std::vector<int>{0});
  EXPECT_TRUE(parse_numa_nodes("").empty());
  const std::vector<int> online = numa_nodes();
  ASSERT_FALSE(online.empty());
  for (size_t i = 1; i < online.size(); ++i) EXPECT_LT(online[i - 1], online[i]);
}

TEST(Numa, PoliciesHaveTheirNamesAndAnythingElseIsAnError) {
  EXPECT_EQ(numa_policy_named("off"), NumaPolicy::kOff);
  EXPECT_EQ(numa_policy_named("interleave"), NumaPolicy::kInterleave);
  EXPECT_STREQ(numa_policy_name(NumaPolicy::kInterleave), "interleave");
  try {
    numa_policy_named("isolate");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "--numa: 'isolate' is not a policy (off, interleave)");
  }
}

// The kernel's policy for the page at p (MPOL_DEFAULT, MPOL_INTERLEAVE, ...)
// and the nodes it names.
std::pair<int, unsigned long> policy_at(void* p) {
  int mode = -1;
  unsigned long nodes[16] = {};
  EXPECT_EQ(syscall(SYS_get_mempolicy, &mode, nodes, 16 * 64, p, MPOL_F_ADDR), 0) << std::strerror(errno);
  return {mode, nodes[0]};
}

// A large block allocated under kInterleave is interleaved over every online
// node; small blocks (not the weights or the KV pool) are left to the
// kernel's default.
TEST(Numa, LargeBlocksAreInterleavedOverEveryNodeWhenAsked) {
  try {
    set_numa_policy(NumaPolicy::kInterleave);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--numa interleave: the kernel will not interleave"), std::string::npos);
    GTEST_SKIP() << e.what();
  }
  EXPECT_EQ(numa_policy(), NumaPolicy::kInterleave);
  unsigned long want = 0;
  for (int n : numa_nodes())
    if (n < 64) want |= 1ul << n;
  auto* big = static_cast<uint8_t*>(allocate_hinted(2 * kHugePage));
  std::memset(big, 1, 2 * kHugePage);
  const auto [mode, nodes] = policy_at(big);
  EXPECT_EQ(mode, MPOL_INTERLEAVE);
  EXPECT_EQ(nodes, want);
  EXPECT_EQ(policy_at(big + 2 * kHugePage - 1).first, MPOL_INTERLEAVE);
  auto* small = static_cast<uint8_t*>(allocate_hinted(4096));
  EXPECT_EQ(policy_at(small).first, MPOL_DEFAULT);
  free_hinted(small);
  free_hinted(big);

  set_numa_policy(NumaPolicy::kOff);
  EXPECT_EQ(numa_policy(), NumaPolicy::kOff);
}

}  // namespace
}  // namespace cs
