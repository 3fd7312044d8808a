// libFuzzer target: the disk tier's chunk files (kv/kv_file.h), which a
// restarted server reads from a directory anyone with access may have
// damaged. Any bytes: no crash, and a file that passes the check encodes
// back to exactly its bytes.
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "kv/kv_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> in(data, size);
  cs::KvFileHeader h;
  (void)cs::parse_kv_header(in, &h);
  std::vector<int32_t> tokens;
  std::span<const uint8_t> body;
  if (cs::check_kv_file(in, &h, &tokens, &body) != cs::KvFileError::kNone) return 0;
  if (cs::encode_kv_file(h, tokens, body) != std::vector<uint8_t>(in.begin(), in.end())) std::abort();
  return 0;
}
