#include "base/numa.h"

#include <linux/mempolicy.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "base/error.h"

namespace cs {
namespace {

std::atomic<NumaPolicy> g_policy{NumaPolicy::kOff};

}  // namespace

std::vector<int> parse_numa_nodes(const std::string& text) {
  std::vector<int> nodes;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) {
    char* end = nullptr;
    const long lo = std::strtol(part.c_str(), &end, 10);
    if (end == part.c_str()) continue;  // no number (an empty part, the line's end)
    long hi = lo;
    if (*end == '-') hi = std::strtol(end + 1, &end, 10);
    for (long n = lo; n <= hi && n >= 0 && n < 4096; ++n) nodes.push_back(int(n));
  }
  return nodes;
}

namespace {

// The nodes as mbind's bit mask: words of 64 nodes, and the count of bits
// the kernel is to read (it reads one less than it is told).
struct NodeMask {
  std::vector<unsigned long> words;
  unsigned long max_node = 0;
};
NodeMask node_mask(const std::vector<int>& nodes) {
  NodeMask m;
  int most = 0;
  for (int n : nodes) most = std::max(most, n);
  constexpr int kBits = int(sizeof(unsigned long)) * 8;
  m.words.assign(size_t(most / kBits + 1), 0ul);
  for (int n : nodes) m.words[size_t(n / kBits)] |= 1ul << (n % kBits);
  m.max_node = m.words.size() * kBits + 1;
  return m;
}

long interleave(void* p, size_t bytes) {
  static const NodeMask mask = node_mask(numa_nodes());
  return syscall(SYS_mbind, p, bytes, MPOL_INTERLEAVE, mask.words.data(), mask.max_node, MPOL_MF_MOVE);
}

}  // namespace

NumaPolicy numa_policy_named(const std::string& name) {
  if (name == "off") return NumaPolicy::kOff;
  if (name == "interleave") return NumaPolicy::kInterleave;
  throw Error("--numa: '" + name + "' is not a policy (off, interleave)");
}

const char* numa_policy_name(NumaPolicy p) { return p == NumaPolicy::kInterleave ? "interleave" : "off"; }

std::vector<int> numa_nodes() {
  std::ifstream f("/sys/devices/system/node/online");
  std::string text;
  std::vector<int> nodes;
  if (f && std::getline(f, text)) nodes = parse_numa_nodes(text);
  if (nodes.empty()) nodes.push_back(0);
  return nodes;
}

void set_numa_policy(NumaPolicy p) {
  if (p == NumaPolicy::kInterleave) {
    // A page mapped for the try alone (a heap page would keep the policy
    // for whatever the heap puts there next).
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    void* probe = mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (probe == MAP_FAILED) throw std::bad_alloc();
    const long r = interleave(probe, page);
    const int err = errno;
    munmap(probe, page);
    if (r != 0)
      throw Error(std::string("--numa interleave: the kernel will not interleave this process's memory (mbind: ") +
                  std::strerror(err) + ")");
  }
  g_policy.store(p);
}

NumaPolicy numa_policy() { return g_policy.load(); }

void apply_numa_policy(void* p, size_t bytes) noexcept {
  if (g_policy.load() == NumaPolicy::kInterleave) interleave(p, bytes);
}

}  // namespace cs
