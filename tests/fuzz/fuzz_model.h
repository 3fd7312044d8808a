// The default model's tokenizer for the fuzz targets ($CHUNKSERVE_MODEL or
// the path compiled in), loaded once.
#pragma once
#include <cstdlib>
#include <memory>

#include "model/gguf.h"
#include "model/tokenizer.h"

namespace cs::fuzz {

inline const Tokenizer& tokenizer() {
  static const std::unique_ptr<Tokenizer> tok = [] {
    const char* env = std::getenv("CHUNKSERVE_MODEL");
    const GgufFile f(env ? env : CS_MODEL);
    return std::make_unique<Tokenizer>(Tokenizer::from_gguf(f));
  }();
  return *tok;
}

}  // namespace cs::fuzz
