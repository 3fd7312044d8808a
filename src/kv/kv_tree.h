// A prefix tree with its chunks' bytes in a KvMemory of its own, in host
// memory or on a CUDA device, and the copies it queues made at once: the
// model's cache keeps one (cache/prefix_kv.h). join, append and truncate
// hide the tree's own to make the copies; a copy left untaken through a
// PrefixTree& is caught by the tree's next call (debug builds).
#pragma once
#include <memory>

#include "kv/device_kv_memory.h"
#include "kv/host_kv_memory.h"
#include "kv/prefix_tree.h"

namespace cs {

enum class KvPlace { kHost, kDevice };

class KvTree : public PrefixTree {
 public:
  // kDevice throws cs::Error when no device is usable, ErrorKind::kNoRoom
  // when it lacks the memory (kv/device_kv_memory.h): at start.
  KvTree(KvLayout layout, size_t capacity_bytes, bool retain = true, KvPlace place = KvPlace::kHost)
      : PrefixTree(layout, capacity_bytes, retain) {
    if (place == KvPlace::kDevice) {
      auto d = std::make_unique<DeviceKvMemory>(layout, capacity());
      device_ = d.get();
      memory_ = std::move(d);
    } else {
      auto h = std::make_unique<HostKvMemory>(layout, capacity());
      host_ = h.get();
      memory_ = std::move(h);
    }
  }

  KvStatus join(SeqId id, std::span<const int32_t> tokens, int* matched) {
    const KvStatus st = PrefixTree::join(id, tokens, matched);
    copy_queued();
    return st;
  }
  KvStatus append(SeqId id, std::span<const int32_t> tokens) {
    const KvStatus st = PrefixTree::append(id, tokens);
    copy_queued();
    return st;
  }
  KvStatus truncate(SeqId id, int n) {
    const KvStatus st = PrefixTree::truncate(id, n);
    copy_queued();
    return st;
  }

  KvMemory& memory() { return *memory_; }
  const KvMemory& memory() const { return *memory_; }
  // The memory as what it is: one of these is null.
  HostKvMemory* host() { return host_; }
  const HostKvMemory* host() const { return host_; }
  DeviceKvMemory* device() { return device_; }
  const DeviceKvMemory* device() const { return device_; }

 private:
  void copy_queued() {
    for (const KvCopy& c : take_copies()) memory_->copy_prefix(c.src, c.dst, c.n);
  }
  std::unique_ptr<KvMemory> memory_;
  HostKvMemory* host_ = nullptr;
  DeviceKvMemory* device_ = nullptr;
};

}  // namespace cs
