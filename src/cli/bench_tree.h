// The trees the attention tables run on (`bench attention`, on the CPU and the
// GPU): b sequences of n_p prompt tokens, the first n_s of them the same in
// every sequence (none when !share), joined in one prefix tree of one layer,
// with room for every chunk. Throws cs::Error if the pool cannot hold them.
#pragma once
#include <memory>

#include "kv/host_tree.h"

namespace cs {

std::unique_ptr<HostTree> shared_prompt_tree(const KvLayout& layout, int b, int n_s, int n_p, bool share);

}  // namespace cs
