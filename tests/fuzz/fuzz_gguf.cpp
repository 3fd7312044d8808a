// libFuzzer: the GGUF reader on arbitrary files, opened to load and to describe. Malformed input must end in
// a cs::Error naming the problem, never a crash, an out-of-bounds read or an
// unbounded allocation; a file it accepts must have consistent tensors.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "base/error.h"
#include "model/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/chunkserve_fuzz_" + std::to_string(getpid()) + ".gguf";
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  try {
    cs::GgufFile g(path);
    // Accepted tensors lie inside the file.
    const uint8_t* begin = g.mapped().data();
    for (const auto& t : g.tensors())
      if (t.data < begin || t.data + t.n_bytes > begin + size) std::abort();
  } catch (const cs::Error&) {
  }
  // Opened to describe (`chunkserve info`): tensors of unread types are
  // kept without data; the others still lie inside the file.
  try {
    cs::GgufFile g(path, cs::GgufOpen::kDescribe);
    const uint8_t* begin = g.mapped().data();
    for (const auto& t : g.tensors())
      if (t.supported ? t.data < begin || t.data + t.n_bytes > begin + size : t.data != nullptr) std::abort();
  } catch (const cs::Error&) {
  }
  return 0;
}
