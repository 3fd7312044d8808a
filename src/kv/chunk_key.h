// A full chunk's name in the disk tier (kv/disk_tier.h): 128 bits of SHA-256
// over its parent's name and its tokens, chained from a root that names the
// model file and the KV layout. A key thus names the chunk's whole token
// prefix under one model and layout: equal keys mean equal K/V, and a chunk
// computed by another model or in another layout never matches.
#pragma once
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>

#include "base/sha256.h"

namespace cs {

struct ChunkKey {
  uint64_t hi = 0, lo = 0;
  bool operator==(const ChunkKey&) const = default;
  auto operator<=>(const ChunkKey&) const = default;
  // 32 lower-case hex digits (a file name).
  std::string hex() const {
    static const char* d = "0123456789abcdef";
    std::string s(32, '0');
    for (int i = 0; i < 16; ++i) s[size_t(15 - i)] = d[(hi >> (4 * i)) & 15], s[size_t(31 - i)] = d[(lo >> (4 * i)) & 15];
    return s;
  }
  static std::optional<ChunkKey> from_hex(const std::string& s) {
    if (s.size() != 32) return std::nullopt;
    ChunkKey k;
    for (size_t i = 0; i < 32; ++i) {
      const char c = s[i];
      const int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (v < 0) return std::nullopt;
      uint64_t& w = i < 16 ? k.hi : k.lo;
      w = (w << 4) | uint64_t(v);
    }
    return k;
  }
};

struct ChunkKeyHash {
  size_t operator()(const ChunkKey& k) const { return size_t(k.hi ^ (k.lo * 0x9e3779b97f4a7c15ull)); }
};

// The first 16 bytes of a digest, big-endian, as a key.
inline ChunkKey chunk_key_of_digest(const std::array<uint8_t, 32>& d) {
  ChunkKey k;
  for (int i = 0; i < 8; ++i) k.hi = (k.hi << 8) | d[size_t(i)], k.lo = (k.lo << 8) | d[size_t(8 + i)];
  return k;
}

// SHA-256 over parent (hi, lo: 16 bytes big-endian) then the tokens (4 bytes
// little-endian each).
inline ChunkKey chunk_key(const ChunkKey& parent, std::span<const int32_t> tokens) {
  std::string buf(16 + 4 * tokens.size(), '\0');
  for (int i = 0; i < 8; ++i) {
    buf[size_t(i)] = char(parent.hi >> (56 - 8 * i));
    buf[size_t(8 + i)] = char(parent.lo >> (56 - 8 * i));
  }
  for (size_t t = 0; t < tokens.size(); ++t)
    for (int b = 0; b < 4; ++b) buf[16 + 4 * t + size_t(b)] = char(uint32_t(tokens[t]) >> (8 * b));
  return chunk_key_of_digest(sha256({reinterpret_cast<const uint8_t*>(buf.data()), buf.size()}));
}

// The root of the chain: the model file's SHA-256 (hex) and a description
// of the KV layout (type, chunk size, layers, KV heads, head dimension).
inline ChunkKey chunk_key_root(const std::string& model_sha256, const std::string& layout) {
  const std::string s = "chunkserve kv disk tier 1\n" + model_sha256 + "\n" + layout;
  return chunk_key_of_digest(sha256({reinterpret_cast<const uint8_t*>(s.data()), s.size()}));
}

}  // namespace cs
