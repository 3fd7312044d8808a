// A KV store for one sequence (id 0) of up to `tokens` tokens, where the
// model runs: the CPU's contiguous cache (cache/contiguous_kv.h), or beside a
// device model the chunk cache on its GPU (cache/prefix_kv.h on
// KvPlace::kDevice), as the engine keeps it there; a model whose attention
// the GPU does not run (sinks, f32 KV) keeps the contiguous cache on the host.
// For the single-sequence measurements: bench model, perplexity.
#pragma once
#include <memory>

#include "kv/chunk_pool.h"
#include "kv/kv_store.h"
#include "model/llama.h"

namespace cs {

std::unique_ptr<KvStore> sequence_kv(const LlamaModel& model, int tokens, KvType type);

}  // namespace cs
