#include "cli/bench_tree.h"

#include <span>
#include <vector>

#include "base/error.h"

namespace cs {

std::unique_ptr<HostTree> shared_prompt_tree(const KvLayout& L, int b, int n_s, int n_p, bool share) {
  const int per_seq = (n_p + L.chunk_size - 1) / L.chunk_size + 1;
  auto tree = std::make_unique<HostTree>(L, L.chunk_bytes() * size_t(b * per_seq + 2), false);
  for (int s = 0; s < b; ++s) {
    std::vector<int32_t> prompt(static_cast<size_t>(n_p));
    for (int i = 0; i < n_p; ++i) prompt[size_t(i)] = share && i < n_s ? i : 1000000 * (s + 1) + i;
    int m;
    if (!tree->join(s, prompt, &m).ok() || !tree->append(s, std::span(prompt).subspan(size_t(m))).ok())
      throw Error("bench: KV pool too small");
  }
  return tree;
}

}  // namespace cs
