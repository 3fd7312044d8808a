// SHA-256 (OpenSSL's libcrypto): identifies a model file and checks saved
// Prompt Cache schemas for damage.
#pragma once
#include <cstdint>
#include <span>
#include <string>

namespace cs {

// Lower-case hex digest of `bytes`.
std::string sha256_hex(std::span<const uint8_t> bytes);

}  // namespace cs
