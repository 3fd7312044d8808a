// GGUF v2/v3 reader: header, metadata of every value type, tensor infos and a
// read-only mmap of tensor data. Every size and offset is validated against the
// file before use; any problem throws cs::Error("<path>: <problem>"), never an
// out-of-bounds read. Thread-safe for concurrent readers once constructed.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/mapped_file.h"
#include "model/ggml_types.h"

namespace cs {

enum class GgufType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
};
const char* gguf_type_name(GgufType t);

// One metadata value. Scalars are held widened (integers in `i`/`u`, floats in
// `f`); arrays of strings in `strs`, arrays of numbers and bools in `nums`.
// Nested arrays are validated and skipped (only their length is kept).
struct GgufValue {
  GgufType type = GgufType::U8;
  GgufType elem = GgufType::U8;  // element type when type == ARRAY
  int64_t i = 0;
  uint64_t u = 0;
  double f = 0;
  std::string s;
  std::vector<std::string> strs;
  std::vector<double> nums;
  uint64_t array_len = 0;
};

struct GgufTensor {
  std::string name;
  std::array<int64_t, 4> ne{1, 1, 1, 1};  // ne[0] is the contiguous (row) dimension
  uint32_t n_dims = 0;
  GgmlType type = GgmlType::F32;
  uint64_t offset = 0;  // from the start of the data section
  uint64_t n_elements = 0;
  uint64_t n_bytes = 0;
  const uint8_t* data = nullptr;  // points into the mapping
  bool supported = true;  // false only in a file opened to describe it (n_bytes 0, data null)
};

// How GgufFile treats a tensor of a type chunkserve does not read: an error
// naming it (kLoad), or recorded with supported = false so the file can
// still be described (`chunkserve info`).
enum class GgufOpen { kLoad, kDescribe };

class GgufFile {
 public:
  explicit GgufFile(const std::string& path, GgufOpen mode = GgufOpen::kLoad);

  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  const std::string& path() const { return file_.path(); }
  const MappedFile& mapped() const { return file_; }

  const std::map<std::string, GgufValue>& metadata() const { return kv_; }
  bool has(const std::string& key) const { return kv_.count(key) != 0; }

  // Typed accessors: throw naming the key when it is missing or of another type.
  // Integer getters accept any integer type whose value fits.
  uint64_t get_uint(const std::string& key) const;
  int64_t get_int(const std::string& key) const;
  double get_float(const std::string& key) const;  // F32/F64 (or an integer)
  bool get_bool(const std::string& key) const;
  const std::string& get_string(const std::string& key) const;
  const std::vector<std::string>& get_strings(const std::string& key) const;
  const std::vector<double>& get_numbers(const std::string& key) const;

  // Optional variants return the fallback when the key is absent.
  uint64_t get_uint(const std::string& key, uint64_t fallback) const;
  double get_float(const std::string& key, double fallback) const;
  bool get_bool(const std::string& key, bool fallback) const;
  std::string get_string(const std::string& key, const std::string& fallback) const;

  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* find_tensor(const std::string& name) const;
  const GgufTensor& tensor(const std::string& name) const;  // throws if missing

  [[noreturn]] void fail(const std::string& problem) const;

 private:
  const GgufValue& get(const std::string& key, GgufType want) const;
  void parse();

  MappedFile file_;
  GgufOpen mode_ = GgufOpen::kLoad;
  uint32_t version_ = 0;
  uint32_t alignment_ = 32;
  std::map<std::string, GgufValue> kv_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

}  // namespace cs
