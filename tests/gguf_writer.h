// Builds GGUF files byte by byte for tests, including deliberately broken ones.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace cs::test {

class GgufWriter {
 public:
  explicit GgufWriter(uint32_t version = 3, uint32_t magic = 0x46554747) {
    put<uint32_t>(magic);
    put<uint32_t>(version);
    count_at_ = buf_.size();
    put<uint64_t>(0);  // tensor count, patched
    put<uint64_t>(0);  // kv count, patched
  }
  template <typename T>
  void put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    buf_.insert(buf_.end(), p, p + sizeof(T));
  }
  void put_str(const std::string& s) {
    put<uint64_t>(s.size());
    buf_.insert(buf_.end(), s.begin(), s.end());
  }
  // A key with a raw type id; the caller writes the value with put/put_str.
  void key(const std::string& k, uint32_t type) {
    put_str(k);
    put<uint32_t>(type);
    ++n_kv_;
  }
  void kv_u32(const std::string& k, uint32_t v) { key(k, 4), put<uint32_t>(v); }
  void kv_f32(const std::string& k, float v) { key(k, 6), put<float>(v); }
  void kv_str(const std::string& k, const std::string& v) { key(k, 8), put_str(v); }
  void kv_bool(const std::string& k, bool v) { key(k, 7), put<uint8_t>(v); }
  void kv_strs(const std::string& k, const std::vector<std::string>& v) {
    key(k, 9);
    put<uint32_t>(8);
    put<uint64_t>(v.size());
    for (const auto& s : v) put_str(s);
  }
  void kv_f32s(const std::string& k, const std::vector<float>& v) {
    key(k, 9);
    put<uint32_t>(6);
    put<uint64_t>(v.size());
    for (float x : v) put<float>(x);
  }
  void kv_i32s(const std::string& k, const std::vector<int32_t>& v) {
    key(k, 9);
    put<uint32_t>(5);
    put<uint64_t>(v.size());
    for (int32_t x : v) put<int32_t>(x);
  }
  // Tensor info; data appended by data() in the same order.
  void tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
    put_str(name);
    put<uint32_t>(uint32_t(ne.size()));
    for (auto n : ne) put<uint64_t>(n);
    put<uint32_t>(type);
    put<uint64_t>(offset);
    ++n_tensors_;
  }
  // Pads to the alignment and appends the data section.
  void data(const std::vector<uint8_t>& bytes, size_t align = 32) {
    while (buf_.size() % align) buf_.push_back(0);
    buf_.insert(buf_.end(), bytes.begin(), bytes.end());
  }
  std::vector<uint8_t> bytes() const {
    std::vector<uint8_t> b = buf_;
    std::memcpy(b.data() + count_at_, &n_tensors_, 8);
    std::memcpy(b.data() + count_at_ + 8, &n_kv_, 8);
    return b;
  }
  // Writes the file under the test temp dir; returns its path.
  std::string write(const std::string& name) const;
  static std::string write_bytes(const std::string& name, const std::vector<uint8_t>& b);

 private:
  std::vector<uint8_t> buf_;
  size_t count_at_ = 0;
  uint64_t n_tensors_ = 0, n_kv_ = 0;
};

}  // namespace cs::test
