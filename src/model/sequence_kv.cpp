#include "model/sequence_kv.h"

#include "base/error.h"
#include "cache/contiguous_kv.h"
#include "cache/prefix_kv.h"

namespace cs {

std::unique_ptr<KvStore> sequence_kv(const LlamaModel& model, int tokens, KvType type) {
  const LlamaConfig& c = model.config();
  bool sinks = false;
  for (const LlamaLayer& l : model.layers()) sinks = sinks || !l.sinks.empty();
  if (!model.backend().on_device() || sinks || type == KvType::kF32)
    return std::make_unique<ContiguousKv>(c.kv_shape(), tokens, type);
  const KvLayout layout{c.n_layers, c.n_kv_heads, c.head_dim, 64, type};
  auto kv = std::make_unique<PrefixKv>(layout, layout.chunk_bytes() * size_t(tokens / 64 + 2), c.n_heads,
                                       AttnPath::kPerSequence, false, KvPlace::kDevice);
  int matched = 0;
  const KvStatus st = kv->join(0, {}, &matched);
  if (!st.ok()) throw Error(st.message);
  return kv;
}

}  // namespace cs
