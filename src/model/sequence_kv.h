// Where a model's KV lives, and one sequence's KV store there (the
// single-sequence measurements: bench model, perplexity).
#pragma once
#include <memory>
#include <string>

#include "kv/chunk_pool.h"
#include "kv/kv_store.h"
#include "kv/kv_tree.h"
#include "model/llama.h"

namespace cs {

// On the GPU beside a device model's activations, unless the GPU's attention
// does not run the model yet (attention sinks, f32 KV, a head dim other than
// 64/128/256); then in host memory, its rows crossing over each layer, and
// *why (when given) says so in one line. The engine and sequence_kv ask it.
KvPlace kv_place(const LlamaModel& model, KvType type, std::string* why = nullptr);

// A KV store for one sequence (id 0) of up to `tokens` tokens at
// kv_place(): the CPU's contiguous cache (cache/contiguous_kv.h), or the
// chunk cache on the GPU (cache/prefix_kv.h on KvPlace::kDevice), as the
// engine keeps it there.
std::unique_ptr<KvStore> sequence_kv(const LlamaModel& model, int tokens, KvType type);

}  // namespace cs
