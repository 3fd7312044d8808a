#include "model/sequence_kv.h"

#include "base/error.h"
#include "cache/contiguous_kv.h"
#include "cache/prefix_kv.h"

namespace cs {

KvPlace kv_place(const LlamaModel& model, KvType type, std::string* why) {
  if (!model.backend().on_device()) return KvPlace::kHost;
  const int d = model.config().head_dim;
  bool sinks = false;
  for (const LlamaLayer& l : model.layers()) sinks = sinks || !l.sinks.empty();
  std::string what;
  if (sinks) what = "attention sinks (gpt-oss)";
  else if (model.config().attn_softcap != 0.0f) what = "attention logit soft-capping (Gemma 2)";
  else if (type != KvType::kF16 && type != KvType::kBF16) what = "--kv-type f32 (the GPU's KV is f16 or bf16)";
  else if (d != 64 && d != 128 && d != 256) what = "head dim " + std::to_string(d);
  if (what.empty()) return KvPlace::kDevice;
  if (why) *why = "the KV stays in host memory: the GPU's attention does not run " + what + " yet";
  return KvPlace::kHost;
}

std::unique_ptr<KvStore> sequence_kv(const LlamaModel& model, int tokens, KvType type) {
  const LlamaConfig& c = model.config();
  if (kv_place(model, type) == KvPlace::kHost) return std::make_unique<ContiguousKv>(c.kv_shape(), tokens, type);
  const KvLayout layout{c.n_layers, c.n_kv_heads, c.head_dim, 64, type};
  auto kv = std::make_unique<PrefixKv>(layout, layout.chunk_bytes() * size_t(tokens / 64 + 2), c.n_heads,
                                       AttnPath::kPerSequence, false, KvPlace::kDevice);
  int matched = 0;
  const KvStatus st = kv->join(0, {}, &matched);
  if (!st.ok()) throw Error(st.message);
  return kv;
}

}  // namespace cs
