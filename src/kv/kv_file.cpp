#include "kv/kv_file.h"

#include <xxhash.h>

#include <cstring>

namespace cs {

namespace {
constexpr const char* kMagic = kKvFileMagic;

void put_u32(std::vector<uint8_t>& out, uint32_t v) {
  for (int b = 0; b < 4; ++b) out.push_back(uint8_t(v >> (8 * b)));
}
void put_u64(std::vector<uint8_t>& out, uint64_t v) {
  for (int b = 0; b < 8; ++b) out.push_back(uint8_t(v >> (8 * b)));
}
void put_key(std::vector<uint8_t>& out, const ChunkKey& k) {
  for (int i = 0; i < 8; ++i) out.push_back(uint8_t(k.hi >> (56 - 8 * i)));
  for (int i = 0; i < 8; ++i) out.push_back(uint8_t(k.lo >> (56 - 8 * i)));
}
uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int b = 3; b >= 0; --b) v = (v << 8) | p[b];
  return v;
}
uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int b = 7; b >= 0; --b) v = (v << 8) | p[b];
  return v;
}
ChunkKey get_key(const uint8_t* p) {
  ChunkKey k;
  for (int i = 0; i < 8; ++i) k.hi = (k.hi << 8) | p[i], k.lo = (k.lo << 8) | p[8 + i];
  return k;
}
}  // namespace

const char* kv_file_error_name(KvFileError e) {
  switch (e) {
    case KvFileError::kNone: return "ok";
    case KvFileError::kShort: return "truncated";
    case KvFileError::kMagic: return "not a chunk file";
    case KvFileError::kVersion: return "unknown version";
    case KvFileError::kSize: return "wrong length";
    case KvFileError::kChecksum: return "checksum mismatch";
  }
  return "?";
}

std::vector<uint8_t> encode_kv_file(const KvFileHeader& h, std::span<const int32_t> tokens,
                                    std::span<const uint8_t> data) {
  std::vector<uint8_t> out;
  out.reserve(size_t(kKvFileHeaderBytes + 4 * tokens.size() + data.size() + 8));
  for (int i = 0; i < 8; ++i) out.push_back(uint8_t(kMagic[i]));
  put_u32(out, h.version);
  put_u32(out, uint32_t(tokens.size()));
  put_u64(out, data.size());
  put_key(out, h.root);
  put_key(out, h.key);
  put_key(out, h.parent);
  for (int32_t t : tokens) put_u32(out, uint32_t(t));
  const size_t at = out.size();
  out.resize(at + data.size());
  if (!data.empty()) std::memcpy(out.data() + at, data.data(), data.size());
  put_u64(out, XXH3_64bits(out.data(), out.size()));
  return out;
}

KvFileError parse_kv_header(std::span<const uint8_t> b, KvFileHeader* h) {
  if (b.size() < kKvFileHeaderBytes) return KvFileError::kShort;
  if (std::memcmp(b.data(), kMagic, 8) != 0) return KvFileError::kMagic;
  h->version = get_u32(b.data() + 8);
  if (h->version != 1) return KvFileError::kVersion;
  h->tokens = get_u32(b.data() + 12);
  h->data_bytes = get_u64(b.data() + 16);
  if (h->tokens > (1u << 20) || h->data_bytes > (1ull << 32)) return KvFileError::kSize;
  h->root = get_key(b.data() + 24);
  h->key = get_key(b.data() + 40);
  h->parent = get_key(b.data() + 56);
  return KvFileError::kNone;
}

KvFileError check_kv_parts(std::span<const uint8_t> head, std::span<const uint8_t> data, std::span<const uint8_t> sum,
                           KvFileHeader* h, std::vector<int32_t>* tokens) {
  if (const KvFileError e = parse_kv_header(head, h); e != KvFileError::kNone) return e;
  const uint64_t n = uint64_t(head.size()) + data.size() + sum.size();
  if (head.size() != kKvFileHeaderBytes + 4ull * h->tokens || data.size() != h->data_bytes || sum.size() != 8)
    return n < h->file_bytes() ? KvFileError::kShort : KvFileError::kSize;
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  XXH3_64bits_update(st, head.data(), head.size());
  XXH3_64bits_update(st, data.data(), data.size());
  const uint64_t digest = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  if (digest != get_u64(sum.data())) return KvFileError::kChecksum;
  tokens->resize(h->tokens);
  for (uint32_t i = 0; i < h->tokens; ++i) (*tokens)[i] = int32_t(get_u32(head.data() + kKvFileHeaderBytes + 4 * i));
  return KvFileError::kNone;
}

KvFileError check_kv_file(std::span<const uint8_t> file, KvFileHeader* h, std::vector<int32_t>* tokens,
                          std::span<const uint8_t>* data) {
  if (const KvFileError e = parse_kv_header(file, h); e != KvFileError::kNone) return e;
  if (file.size() < h->file_bytes()) return KvFileError::kShort;
  if (file.size() > h->file_bytes()) return KvFileError::kSize;
  const size_t head = kKvFileHeaderBytes + 4ull * h->tokens;
  const KvFileError e = check_kv_parts(file.first(head), file.subspan(head, size_t(h->data_bytes)),
                                       file.last(8), h, tokens);
  if (e == KvFileError::kNone) *data = file.subspan(head, size_t(h->data_bytes));
  return e;
}

}  // namespace cs
