// Single-sequence generation: prefill the prompt, then decode token by token
// until EOS, a stop string or max_tokens. Text is streamed through a callback
// in whole UTF-8 characters; a stop string is never emitted, even in part.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "kv/chunk_pool.h"
#include "model/llama.h"

namespace cs {

struct GenerateParams {
  SamplingParams sampling;
  int max_tokens = 128;
  std::vector<std::string> stop;  // stop strings
  int n_ctx = 0;                  // 0 = the model's training context
  int prefill_chunk = 256;        // prompt tokens per forward call
  // KV storage: the contiguous cache, or the prefix-aware chunk cache
  // (two-phase partition attention) that batches of requests share; either
  // holds elements of kv_type (attention accumulates in fp32).
  bool chunk_cache = false;
  KvType kv_type = KvType::kF16;
};

struct GenerateResult {
  std::vector<int32_t> tokens;   // generated ids (without the prompt)
  std::vector<float> top2_gap;   // per generated token: top-1 minus top-2 logit
  std::string text;
  std::string stop_reason;       // "eos", "stop", "length"
  double prefill_seconds = 0, decode_seconds = 0;
  int prompt_tokens = 0;
};

// Throws cs::Error if the prompt is empty or does not fit the context.
GenerateResult generate(const LlamaModel& model, const std::vector<int32_t>& prompt,
                        const GenerateParams& params,
                        const std::function<void(const std::string&)>& on_text = {});

}  // namespace cs
