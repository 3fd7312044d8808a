#include "engine/validate.h"

#include <cmath>
#include <string>

namespace cs {
namespace {

void check_finite(float v, int lo, int hi, const char* name, bool lo_open = false) {
  if (!std::isfinite(v) || v < float(lo) || v > float(hi) || (lo_open && v == float(lo)))
    throw RequestError(std::string(name) + " must be a number in " + (lo_open ? "(" : "[") + std::to_string(lo) +
                           ", " + std::to_string(hi) + "]",
                       name);
}

}  // namespace

void validate_request(const Request& r, const RequestLimits& lim) {
  if (r.prompt.empty()) throw RequestError("the prompt is empty", "prompt");
  for (int32_t t : r.prompt)
    if (t < 0 || t >= lim.n_vocab)
      throw RequestError("prompt token " + std::to_string(t) + " is not in the vocabulary (0 to " +
                             std::to_string(lim.n_vocab - 1) + ")",
                         "prompt");
  if (int(r.prompt.size()) >= lim.n_ctx)
    throw RequestError("the prompt has " + std::to_string(r.prompt.size()) + " tokens, more than fits the context of " +
                           std::to_string(lim.n_ctx),
                       "prompt");
  // Chunks of its own at the least (tokens in cached spans are read from
  // pinned chunks): its tokens and the first one it samples. A lower bound,
  // so no request that could run is refused.
  int own = int(r.prompt.size());
  for (const CachedSpan& s : r.cached) own -= s.end - s.begin;
  const int need = own / lim.chunk_size + 1;
  const int room = lim.pool_chunks - lim.pinned_chunks;
  if (need > room) {
    std::string msg = "the prompt has " + std::to_string(r.prompt.size()) + " tokens and needs " +
                      std::to_string(need) + " chunks of KV memory; the pool holds " + std::to_string(lim.pool_chunks) +
                      " (" + std::to_string(lim.pool_bytes >> 20) + " MiB)";
    if (lim.pinned_chunks > 0)
      msg += ", of which Prompt Cache schemas pin " + std::to_string(lim.pinned_chunks) + ", leaving " +
             std::to_string(std::max(0, room));
    throw RequestError(msg, "prompt");
  }
  if (r.max_tokens < 0) throw RequestError("max_tokens must not be negative", "max_tokens");
  if (r.n < 1 || r.n > lim.max_n) throw RequestError("n must be between 1 and " + std::to_string(lim.max_n), "n");
  if (r.logprobs > 20) throw RequestError("logprobs must be at most 20", "logprobs");
  if (r.think_budget < -1) throw RequestError("the thinking budget must not be negative", "thinking");
  for (const auto* close : {&r.think_end, &r.think_resume})
    for (int32_t t : *close)
      if (t < 0 || t >= lim.n_vocab) throw RequestError("the thought's close has a token outside the vocabulary", "thinking");
  if (!r.grammar_triggers.empty() && !r.grammar)
    throw RequestError("a constraint's triggers need the constraint", "grammar");
  for (const Request::Trigger& t : r.grammar_triggers) {
    if (t.text.empty()) throw RequestError("a constraint's trigger must not be empty", "grammar");
    if (t.skip > t.text.size()) throw RequestError("a constraint's trigger skips past its end", "grammar");
  }
  check_finite(r.sampling.temperature, 0, 100, "temperature");
  check_finite(r.sampling.top_p, 0, 1, "top_p", true);
  check_finite(r.sampling.repeat_penalty, 0, 100, "repeat_penalty", true);
  check_finite(r.sampling.presence_penalty, -2, 2, "presence_penalty");
  check_finite(r.sampling.frequency_penalty, -2, 2, "frequency_penalty");
  if (r.sampling.top_k < 0) throw RequestError("top_k must not be negative", "top_k");
  const int n = int(r.prompt.size());
  if (!r.positions.empty()) {
    if (int(r.positions.size()) != n)
      throw RequestError("positions has " + std::to_string(r.positions.size()) + " entries for " + std::to_string(n) +
                             " prompt tokens",
                         "positions");
    for (int i = 0; i < n; ++i)
      if (r.positions[size_t(i)] < (i ? r.positions[size_t(i) - 1] : 0))
        throw RequestError("positions must be non-decreasing and non-negative (token " + std::to_string(i) + ")",
                           "positions");
    if (r.positions.back() >= lim.n_ctx)
      throw RequestError("position " + std::to_string(r.positions.back()) + " is past the context of " +
                             std::to_string(lim.n_ctx),
                         "positions");
  }
  if (!r.cached.empty() && !lim.cached_spans)
    throw RequestError("cached spans (Prompt Cache) need an attention mode that shares KV, not none", "cached");
  int at = 0;
  for (const CachedSpan& s : r.cached) {
    if (s.begin < at || s.end <= s.begin || s.end >= n)
      throw RequestError("cached span [" + std::to_string(s.begin) + ", " + std::to_string(s.end) +
                             ") overlaps another, is empty or reaches the last prompt token",
                         "cached");
    at = s.end;
    if (s.chunks.empty()) throw RequestError("a cached span has no chunks", "cached");
  }
}

}  // namespace cs
