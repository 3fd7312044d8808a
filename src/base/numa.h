// Where the pages of the large arrays (repacked weights, the KV pool) live on
// a machine of several NUMA nodes. By default the kernel puts a page on the
// node of the thread that first writes it: a model loads on one thread, so
// all its weights sit on one node and every other node's cores read them
// across the interconnect, through that one node's memory controllers. The
// matmuls hand tiles to whichever thread is free (model/matmul.cpp), so no
// thread has a part of a weight of its own to place near it; interleaving
// spreads every large array page by page over all nodes instead, and every
// controller serves every step. `numactl --cpunodebind=N --membind=N`
// confines a process to one node's cores and memory (one replica per
// socket behind a router: docs/deploy.md).
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace cs {

enum class NumaPolicy {
  kOff,         // the kernel's default: where first written
  kInterleave,  // page by page over every online node
};

// "off" or "interleave"; an Error names anything else.
NumaPolicy numa_policy_named(const std::string& name);
const char* numa_policy_name(NumaPolicy p);

// The nodes of a list in the kernel's format ("0", "0-3", "0-1,4-5"),
// ascending as written.
std::vector<int> parse_numa_nodes(const std::string& text);

// The online nodes (/sys/devices/system/node/online), ascending; {0} where
// the kernel lists none (no NUMA support).
std::vector<int> numa_nodes();

// The policy of the large arrays allocated from now on (allocate_hinted).
// kInterleave is tried at once on a block of its own, so a kernel without
// NUMA support, or a process the kernel refuses it to, is an Error here
// naming why, never a silent default later.
void set_numa_policy(NumaPolicy p);
NumaPolicy numa_policy();

// Puts [p, p + bytes) (page-aligned) under the current policy, moving pages
// already written; a hint after set_numa_policy has checked it works.
void apply_numa_policy(void* p, size_t bytes) noexcept;

}  // namespace cs
