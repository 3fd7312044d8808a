// On a GPU, the engine's largest step runs once before the first request
// (Engine::Impl::reserve_device_step), so the device buffers that grow with a
// step's size (the activations, the head's logits, the KV's plan arrays, the
// attention's partial states for a prompt of that many tokens) reach their
// largest size at start: a device short of memory for them fails there, with
// what to lower, not in the middle of serving. What still grows later is the
// attention's partial states for contexts longer than one step (a few MiB per
// thousand tokens of context); an allocation that fails there ends that
// step's requests with the error and the engine goes on serving.
#include <algorithm>
#include <exception>
#include <string>

#include "base/error.h"
#include "engine/draft.h"
#include "engine/engine_impl.h"

namespace cs {

void Engine::Impl::reserve_device_step() {
  if (!model.backend().on_device()) return;
  const EngineOptions& o = engine.opt_;
  const LlamaConfig& c = model.config();
  // A step's most tokens: the step budget, or every decoding sequence with
  // speculation's drafts (those come before the budget), within the context
  // and the pool (one chunk to spare).
  int tokens = std::max(o.step_tokens, o.max_batch + o.speculate_max_batch * DraftPacer::kMaxDraft);
  tokens = std::min({tokens, engine.n_ctx_ - 1, (kv.capacity() - 1) * kv.chunk_size()});
  // Its most rows with logits: a token of each sequence, or a few decoding
  // sequences' drafts.
  const int rows = std::min(tokens, std::max(o.max_batch, o.speculate_max_batch * (DraftPacer::kMaxDraft + 1)));
  if (tokens < 1) return;
  const SeqId id = next_seq++;
  int matched = 0;
  expect_ok(kv.join(id, {}, &matched), "joining the device's first step");
  Batch b;
  for (int t = 0; t < tokens; ++t) b.add(int32_t(t % c.n_vocab), t, int32_t(id), t >= tokens - rows);
  std::exception_ptr failed;
  try {
    model.forward(b, kv, ws, logits);
  } catch (...) {
    failed = std::current_exception();
  }
  // Its K/V leave with it, run or not: nothing of it stays in the tree.
  expect_ok(kv.leave(id), "leaving the device's first step");
  kv.flush();
  if (!failed) return;
  try {
    std::rethrow_exception(failed);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kNoRoom) throw;
    throw Error(std::string(e.what()) + ": the device has no room for a step of " + std::to_string(tokens) +
                    " tokens (" + std::to_string(rows) + " with logits) beside the weights and the KV pool; " +
                    "lower --kv-memory, --step-tokens or --max-batch",
                ErrorKind::kNoRoom);
  }
}

}  // namespace cs
