#include "base/sha256.h"

#include <openssl/evp.h>

#include "base/error.h"

namespace cs {

std::array<uint8_t, 32> sha256(std::span<const uint8_t> bytes) {
  std::array<uint8_t, 32> md{};
  unsigned int n = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), md.data(), &n, EVP_sha256(), nullptr) != 1 || n != md.size())
    throw Error("SHA-256 failed (libcrypto)");
  return md;
}

std::string sha256_hex(std::span<const uint8_t> bytes) {
  const std::array<uint8_t, 32> md = sha256(bytes);
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < md.size(); ++i) {
    out += hex[md[i] >> 4];
    out += hex[md[i] & 15];
  }
  return out;
}

}  // namespace cs
