// SHA-256 (OpenSSL's libcrypto): identifies a model file, checks saved
// Prompt Cache schemas for damage and names KV blocks (kv/block_ledger.h).
#pragma once
#include <array>
#include <cstdint>
#include <span>
#include <string>

namespace cs {

// The digest of `bytes`, and its lower-case hex.
std::array<uint8_t, 32> sha256(std::span<const uint8_t> bytes);
std::string sha256_hex(std::span<const uint8_t> bytes);

}  // namespace cs
