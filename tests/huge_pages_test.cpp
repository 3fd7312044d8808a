#include "base/huge_pages.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace cs {
namespace {

uintptr_t address(const void* p) { return reinterpret_cast<uintptr_t>(p); }

// Large blocks start on a 2 MB boundary (so the kernel can back them with
// huge pages), small ones on a cache line; both are usable to their end.
TEST(HugePages, LargeBlocksAre2MbAlignedAndSmallOnesOnACacheLine) {
  for (size_t bytes : {size_t(1), size_t(100), kHugePage - 1, kHugePage, 3 * kHugePage + 5}) {
    auto* p = static_cast<uint8_t*>(allocate_hinted(bytes));
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(address(p) % (bytes >= kHugePage ? kHugePage : 64), 0u) << bytes;
    p[0] = 1;
    p[bytes - 1] = 2;
    free_hinted(p);
  }
}

TEST(HugePages, AllocatorServesVectors) {
  std::vector<uint32_t, HugePageAllocator<uint32_t>> v(kHugePage / 4 + 3, 7u);
  EXPECT_EQ(address(v.data()) % kHugePage, 0u);
  EXPECT_EQ(v.back(), 7u);
  v.resize(5);
  v.shrink_to_fit();
  EXPECT_EQ(address(v.data()) % 64, 0u);
  EXPECT_EQ(v[4], 7u);
}

}  // namespace
}  // namespace cs
