// What the engine checks of a request before it queues it: a pure function,
// so the HTTP layer's fuzz target runs it too.
#pragma once
#include <cstddef>

#include "engine/request.h"

namespace cs {

struct RequestLimits {
  int n_vocab = 0;
  int n_ctx = 0;           // context per sequence
  int chunk_size = 64;
  int pool_chunks = 0;     // KV pool capacity
  int pinned_chunks = 0;   // of which Prompt Cache schemas hold (not available to prompts)
  size_t pool_bytes = 0;
  int max_n = 1;           // completions per request (max batch)
  bool cached_spans = true;  // whether cached spans are allowed (not in mode none)
};

// Throws RequestError naming the problem and the field: an empty prompt, ids
// outside the vocabulary, a prompt longer than the context or than the whole
// KV pool beside the pinned schemas, negative max_tokens, n outside [1, max_n], more than 20 logprobs,
// sampling values that are nan, infinite or out of range; positions that are
// not one per token, decreasing or past the context; cached spans that
// overlap, leave the prompt, cover its last token or disagree with their
// chunks' token counts.
void validate_request(const Request& r, const RequestLimits& lim);

}  // namespace cs
