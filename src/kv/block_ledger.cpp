#include "kv/block_ledger.h"

#include <string>

#include "base/error.h"
#include "base/sha256.h"

namespace cs {

uint64_t block_hash(std::optional<uint64_t> parent, std::span<const int32_t> tokens) {
  std::vector<uint8_t> bytes(9 + 4 * tokens.size());
  bytes[0] = parent ? 1 : 0;
  for (int i = 0; i < 8; ++i) bytes[size_t(1 + i)] = uint8_t(parent.value_or(0) >> (8 * i));
  for (size_t j = 0; j < tokens.size(); ++j)
    for (int i = 0; i < 4; ++i) bytes[9 + 4 * j + size_t(i)] = uint8_t(uint32_t(tokens[j]) >> (8 * i));
  const std::array<uint8_t, 32> d = sha256(bytes);
  uint64_t h = 0;
  for (int i = 0; i < 8; ++i) h = (h << 8) | d[i];
  return h >> 1;
}

BlockLedger::BlockLedger(int block_size, int chunk_size) : block_size_(block_size) {
  if (block_size <= 0 || chunk_size % block_size != 0)
    throw Error("KV event block size " + std::to_string(block_size) + " does not divide the chunk size " +
                std::to_string(chunk_size));
}

void BlockLedger::grown(ChunkId c, ChunkId parent, std::span<const int32_t> tokens, int before) {
  if (size_t(c) >= chunk_blocks_.size()) chunk_blocks_.resize(size_t(c) + 1);
  auto& mine = chunk_blocks_[size_t(c)];
  const int have = before / block_size_, now = int(tokens.size()) / block_size_;
  // A chunk under another is below a full chunk: its first block's parent is
  // that chunk's last block.
  std::optional<uint64_t> prev;
  if (!mine.empty())
    prev = mine.back();
  else if (parent != kNoChunk && size_t(parent) < chunk_blocks_.size() && !chunk_blocks_[size_t(parent)].empty())
    prev = chunk_blocks_[size_t(parent)].back();
  for (int b = have; b < now; ++b) {
    const auto block = tokens.subspan(size_t(b) * size_t(block_size_), size_t(block_size_));
    const uint64_t h = block_hash(prev, block);
    mine.push_back(h);
    if (++holders_[h] == 1)
      pending_.push_back({BlockEvent::Kind::kStored, h, prev, std::vector<int32_t>(block.begin(), block.end())});
    prev = h;
  }
}

void BlockLedger::removed(ChunkId c) {
  if (size_t(c) >= chunk_blocks_.size()) return;
  auto& mine = chunk_blocks_[size_t(c)];
  // Deepest first: a block never outlives its parent in the events.
  for (auto it = mine.rbegin(); it != mine.rend(); ++it) {
    auto h = holders_.find(*it);
    if (--h->second == 0) {
      holders_.erase(h);
      pending_.push_back({BlockEvent::Kind::kRemoved, *it, std::nullopt, {}});
    }
  }
  mine.clear();
}

void BlockLedger::reserve(uint64_t owner, std::span<const int32_t> prompt) {
  release(owner);
  auto& mine = reserved_[owner];
  std::optional<uint64_t> prev;
  for (size_t b = 0; (b + 1) * size_t(block_size_) <= prompt.size(); ++b) {
    const auto block = prompt.subspan(b * size_t(block_size_), size_t(block_size_));
    const uint64_t h = block_hash(prev, block);
    mine.push_back(h);
    if (++holders_[h] == 1)
      pending_.push_back({BlockEvent::Kind::kStored, h, prev, std::vector<int32_t>(block.begin(), block.end())});
    prev = h;
  }
}

void BlockLedger::release(uint64_t owner) {
  auto it = reserved_.find(owner);
  if (it == reserved_.end()) return;
  // Deepest first, as removed() does.
  for (auto b = it->second.rbegin(); b != it->second.rend(); ++b) {
    auto h = holders_.find(*b);
    if (--h->second == 0) {
      holders_.erase(h);
      pending_.push_back({BlockEvent::Kind::kRemoved, *b, std::nullopt, {}});
    }
  }
  reserved_.erase(it);
}

std::vector<BlockEvent> BlockLedger::take() {
  std::vector<BlockEvent> out;
  out.swap(pending_);
  return out;
}

}  // namespace cs
