// One chunk of the disk tier as a file (kv/disk_tier.h): a header, the
// chunk's tokens, its K/V bytes exactly as the pool holds them, and a
// checksum of all that (XXH3-64, from Debian's libxxhash) at the end, so a
// torn, truncated or corrupted file is told from a good one before any of it
// is served.
//
//   offset 0   "CSKVCHNK"                      magic
//          8   u32 version (1), u32 tokens     little-endian
//         16   u64 data bytes
//         24   root key, key, parent key       16 bytes each (chunk_key.h, big-endian halves)
//         72   tokens                          i32 little-endian each
//          .   data                            the pool's bytes of the chunk
//          .   u64 XXH3-64 of everything before it
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kv/chunk_key.h"

namespace cs {

inline constexpr size_t kKvFileHeaderBytes = 72;
inline constexpr char kKvFileMagic[9] = "CSKVCHNK";  // the first 8 bytes of every file

struct KvFileHeader {
  uint32_t version = 1;
  uint32_t tokens = 0;
  uint64_t data_bytes = 0;
  ChunkKey root, key, parent;
  // Bytes of the whole file this header describes.
  uint64_t file_bytes() const { return kKvFileHeaderBytes + 4ull * tokens + data_bytes + 8; }
};

enum class KvFileError { kNone, kShort, kMagic, kVersion, kSize, kChecksum };
const char* kv_file_error_name(KvFileError e);

// The whole file for one chunk.
std::vector<uint8_t> encode_kv_file(const KvFileHeader& h, std::span<const int32_t> tokens,
                                    std::span<const uint8_t> data);
// Reads the header from the first kKvFileHeaderBytes of a file (no checksum:
// start-up reads headers only). kNone when it parses and is version 1 with
// at most 1<<20 tokens and 1<<32 data bytes.
KvFileError parse_kv_header(std::span<const uint8_t> bytes, KvFileHeader* h);
// Checks a whole file: header, length and checksum. On kNone, *tokens and
// *data point into `file`.
KvFileError check_kv_file(std::span<const uint8_t> file, KvFileHeader* h, std::vector<int32_t>* tokens,
                          std::span<const uint8_t>* data);
// The same on a file read in three parts (so that the data lands in its own
// buffer): the header with the tokens, the data, the 8 checksum bytes.
KvFileError check_kv_parts(std::span<const uint8_t> head, std::span<const uint8_t> data, std::span<const uint8_t> sum,
                           KvFileHeader* h, std::vector<int32_t>* tokens);

}  // namespace cs
