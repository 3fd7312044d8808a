#include "model/gguf.h"

#include <cstdio>

#include <cstring>
#include <limits>

#include "base/error.h"

namespace cs {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
constexpr uint32_t kMaxDims = 4;
constexpr int kMaxArrayDepth = 8;

// Bounds-checked little-endian cursor over the mapped file.
class Cursor {
 public:
  Cursor(const GgufFile& f, const uint8_t* p, size_t n) : f_(f), base_(p), n_(n) {}
  size_t pos() const { return pos_; }
  size_t left() const { return n_ - pos_; }

  void need(uint64_t bytes, const char* what) const {
    if (bytes > left())
      f_.fail(std::string("truncated file: ") + what + " needs " + std::to_string(bytes) +
              " bytes at offset " + std::to_string(pos_) + ", " + std::to_string(left()) +
              " left");
  }
  template <typename T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, base_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string read_string(const char* what) {
    const uint64_t len = read<uint64_t>(what);
    need(len, what);
    std::string s(reinterpret_cast<const char*>(base_ + pos_), len);
    pos_ += len;
    return s;
  }
  void skip(uint64_t bytes, const char* what) {
    need(bytes, what);
    pos_ += bytes;
  }

 private:
  const GgufFile& f_;
  const uint8_t* base_;
  size_t n_;
  size_t pos_ = 0;
};

int scalar_size(GgufType t) {
  switch (t) {
    case GgufType::U8: case GgufType::I8: case GgufType::BOOL: return 1;
    case GgufType::U16: case GgufType::I16: return 2;
    case GgufType::U32: case GgufType::I32: case GgufType::F32: return 4;
    case GgufType::U64: case GgufType::I64: case GgufType::F64: return 8;
    default: return 0;
  }
}

bool is_valid_type(uint32_t t) { return t <= uint32_t(GgufType::F64); }

// Reads one scalar into v (widened). Returns its numeric value for arrays.
double read_scalar(Cursor& c, GgufType t, GgufValue& v) {
  switch (t) {
    case GgufType::U8: v.u = c.read<uint8_t>("u8"); v.i = int64_t(v.u); return double(v.u);
    case GgufType::I8: v.i = c.read<int8_t>("i8"); v.u = uint64_t(v.i); return double(v.i);
    case GgufType::U16: v.u = c.read<uint16_t>("u16"); v.i = int64_t(v.u); return double(v.u);
    case GgufType::I16: v.i = c.read<int16_t>("i16"); v.u = uint64_t(v.i); return double(v.i);
    case GgufType::U32: v.u = c.read<uint32_t>("u32"); v.i = int64_t(v.u); return double(v.u);
    case GgufType::I32: v.i = c.read<int32_t>("i32"); v.u = uint64_t(v.i); return double(v.i);
    case GgufType::U64: v.u = c.read<uint64_t>("u64"); v.i = int64_t(v.u); return double(v.u);
    case GgufType::I64: v.i = c.read<int64_t>("i64"); v.u = uint64_t(v.i); return double(v.i);
    case GgufType::F32: v.f = c.read<float>("f32"); return v.f;
    case GgufType::F64: v.f = c.read<double>("f64"); return v.f;
    case GgufType::BOOL: {
      const uint8_t b = c.read<uint8_t>("bool");
      v.u = b != 0;
      v.i = b != 0;
      return double(v.u);
    }
    default: return 0;
  }
}

}  // namespace

const char* gguf_type_name(GgufType t) {
  static const char* names[] = {"u8",  "i8",     "u16",   "i16", "u32", "i32", "f32",
                                "bool", "string", "array", "u64", "i64", "f64"};
  return uint32_t(t) <= 12 ? names[uint32_t(t)] : "unknown";
}

GgufFile::GgufFile(const std::string& path, GgufOpen mode) : file_(path), mode_(mode) { parse(); }

// Names in messages come from the file: control bytes (a NUL would cut the
// message short when printed) are written as \xNN, and long names are cut.
void GgufFile::fail(const std::string& problem) const {
  std::string msg;
  for (unsigned char c : problem.substr(0, 400)) {
    if (c < 0x20 || c == 0x7f) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\x%02x", c);
      msg += esc;
    } else {
      msg += char(c);
    }
  }
  if (problem.size() > 400) msg += "...";
  throw Error(path() + ": " + msg);
}

void GgufFile::parse() {
  Cursor c(*this, file_.data(), file_.size());
  if (file_.size() < 4 || c.read<uint32_t>("magic") != kMagic)
    fail("not a GGUF file (bad magic)");
  version_ = c.read<uint32_t>("version");
  if (version_ != 2 && version_ != 3)
    fail("unsupported GGUF version " + std::to_string(version_) + " (supported: 2, 3)");
  const uint64_t n_tensors = c.read<uint64_t>("tensor count");
  const uint64_t n_kv = c.read<uint64_t>("metadata count");
  // Each entry takes at least 12 bytes; reject counts the file cannot hold
  // before reserving anything.
  if (n_kv > c.left() / 12) fail("metadata count " + std::to_string(n_kv) + " exceeds file size");
  if (n_tensors > c.left() / 12)
    fail("tensor count " + std::to_string(n_tensors) + " exceeds file size");

  // Arrays may nest; this reads one value of type t into v.
  auto read_value = [&](auto& self, GgufType t, GgufValue& v, int depth) -> void {
    v.type = t;
    if (t == GgufType::STRING) {
      v.s = c.read_string("string value");
      return;
    }
    if (t != GgufType::ARRAY) {
      read_scalar(c, t, v);
      return;
    }
    if (depth > kMaxArrayDepth) fail("arrays nested too deeply");
    const uint32_t et = c.read<uint32_t>("array type");
    if (!is_valid_type(et)) fail("unknown array element type " + std::to_string(et));
    v.elem = GgufType(et);
    v.array_len = c.read<uint64_t>("array length");
    const int es = scalar_size(v.elem);
    // A string or array element takes at least 8 bytes.
    const uint64_t min_bytes = es ? uint64_t(es) : 8;
    if (v.array_len > c.left() / min_bytes)
      fail("array of " + std::to_string(v.array_len) + " elements exceeds file size");
    if (v.elem == GgufType::STRING) {
      v.strs.reserve(v.array_len);
      for (uint64_t k = 0; k < v.array_len; ++k) v.strs.push_back(c.read_string("array string"));
    } else if (v.elem == GgufType::ARRAY) {
      for (uint64_t k = 0; k < v.array_len; ++k) {
        GgufValue inner;
        self(self, GgufType::ARRAY, inner, depth + 1);
      }
    } else {
      v.nums.resize(v.array_len);
      GgufValue tmp;
      for (uint64_t k = 0; k < v.array_len; ++k) v.nums[k] = read_scalar(c, v.elem, tmp);
    }
  };

  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string key = c.read_string("metadata key");
    const uint32_t t = c.read<uint32_t>("metadata type");
    if (!is_valid_type(t))
      fail("metadata key '" + key + "' has unknown value type " + std::to_string(t));
    GgufValue v;
    read_value(read_value, GgufType(t), v, 0);
    if (!kv_.emplace(key, std::move(v)).second) fail("duplicate metadata key '" + key + "'");
  }

  if (has("general.alignment")) {
    const uint64_t a = get_uint("general.alignment");
    if (a == 0 || (a & (a - 1)) || a > (1u << 20))
      fail("general.alignment " + std::to_string(a) + " is not a power of two");
    alignment_ = uint32_t(a);
  }

  tensors_.reserve(n_tensors);
  for (uint64_t k = 0; k < n_tensors; ++k) {
    GgufTensor t;
    t.name = c.read_string("tensor name");
    t.n_dims = c.read<uint32_t>("tensor dims");
    if (t.n_dims == 0 || t.n_dims > kMaxDims)
      fail("tensor '" + t.name + "' has " + std::to_string(t.n_dims) + " dimensions");
    t.n_elements = 1;
    for (uint32_t d = 0; d < t.n_dims; ++d) {
      const uint64_t ne = c.read<uint64_t>("tensor shape");
      if (ne == 0 || ne > (uint64_t(1) << 40) ||
          t.n_elements > std::numeric_limits<uint64_t>::max() / ne / 8)
        fail("tensor '" + t.name + "' has an invalid shape");
      t.ne[d] = int64_t(ne);
      t.n_elements *= ne;
    }
    const uint32_t type = c.read<uint32_t>("tensor type");
    const auto info = type_info(type);
    if (!info && mode_ == GgufOpen::kDescribe) {
      t.type = GgmlType(type);
      t.supported = false;
      t.offset = c.read<uint64_t>("tensor offset");
      if (!tensor_index_.emplace(t.name, tensors_.size()).second) fail("duplicate tensor '" + t.name + "'");
      tensors_.push_back(std::move(t));
      continue;
    }
    if (!info) {
      const std::string name = type_name(type);
      fail("tensor '" + t.name + "' has " +
           (name.empty() ? "unknown type id " + std::to_string(type) : "type " + name + ", which chunkserve does not support") +
           " (supported: " + supported_type_names() + ")");
    }
    t.type = GgmlType(type);
    if (t.ne[0] % info->block_elems)
      fail("tensor '" + t.name + "' row of " + std::to_string(t.ne[0]) +
           " is not a multiple of the " + info->name + " block size");
    t.n_bytes = t.n_elements / info->block_elems * info->block_bytes;
    t.offset = c.read<uint64_t>("tensor offset");
    if (t.offset % alignment_) fail("tensor '" + t.name + "' offset is not aligned");
    if (!tensor_index_.emplace(t.name, tensors_.size()).second)
      fail("duplicate tensor '" + t.name + "'");
    tensors_.push_back(std::move(t));
  }

  const uint64_t data_start = (c.pos() + alignment_ - 1) / alignment_ * alignment_;
  const uint64_t data_size = data_start <= file_.size() ? file_.size() - data_start : 0;
  for (auto& t : tensors_) {
    if (!t.supported) continue;
    if (t.offset > data_size || t.n_bytes > data_size - t.offset)
      fail("tensor '" + t.name + "' data [" + std::to_string(t.offset) + ", +" +
           std::to_string(t.n_bytes) + ") lies outside the file's data section of " +
           std::to_string(data_size) + " bytes (truncated file?)");
    t.data = file_.data() + data_start + t.offset;
  }
}

const GgufValue& GgufFile::get(const std::string& key, GgufType want) const {
  auto it = kv_.find(key);
  if (it == kv_.end()) fail("missing required key '" + key + "'");
  const GgufValue& v = it->second;
  const bool is_int = scalar_size(v.type) && v.type != GgufType::F32 && v.type != GgufType::F64 &&
                      v.type != GgufType::BOOL;
  bool ok = v.type == want;
  if (want == GgufType::U64 || want == GgufType::I64) ok = is_int;
  if (want == GgufType::F64) ok = is_int || v.type == GgufType::F32 || v.type == GgufType::F64;
  if (!ok)
    fail("key '" + key + "' has type " + gguf_type_name(v.type) + ", expected " +
         gguf_type_name(want));
  return v;
}

uint64_t GgufFile::get_uint(const std::string& key) const {
  const GgufValue& v = get(key, GgufType::U64);
  const bool is_signed = v.type == GgufType::I8 || v.type == GgufType::I16 ||
                         v.type == GgufType::I32 || v.type == GgufType::I64;
  if (is_signed && v.i < 0) fail("key '" + key + "' is negative");
  return v.u;
}
int64_t GgufFile::get_int(const std::string& key) const {
  const GgufValue& v = get(key, GgufType::I64);
  if (v.type == GgufType::U64 && v.u > uint64_t(std::numeric_limits<int64_t>::max()))
    fail("key '" + key + "' is out of range");
  return v.i;
}
double GgufFile::get_float(const std::string& key) const {
  const GgufValue& v = get(key, GgufType::F64);
  if (v.type == GgufType::F32 || v.type == GgufType::F64) return v.f;
  return double(v.i);
}
bool GgufFile::get_bool(const std::string& key) const { return get(key, GgufType::BOOL).u != 0; }
const std::string& GgufFile::get_string(const std::string& key) const {
  return get(key, GgufType::STRING).s;
}
const std::vector<std::string>& GgufFile::get_strings(const std::string& key) const {
  const GgufValue& v = get(key, GgufType::ARRAY);
  if (v.elem != GgufType::STRING) fail("key '" + key + "' is not an array of strings");
  return v.strs;
}
const std::vector<double>& GgufFile::get_numbers(const std::string& key) const {
  const GgufValue& v = get(key, GgufType::ARRAY);
  if (!scalar_size(v.elem)) fail("key '" + key + "' is not an array of numbers");
  return v.nums;
}

uint64_t GgufFile::get_uint(const std::string& key, uint64_t fallback) const {
  return has(key) ? get_uint(key) : fallback;
}
double GgufFile::get_float(const std::string& key, double fallback) const {
  return has(key) ? get_float(key) : fallback;
}
bool GgufFile::get_bool(const std::string& key, bool fallback) const {
  return has(key) ? get_bool(key) : fallback;
}
std::string GgufFile::get_string(const std::string& key, const std::string& fallback) const {
  return has(key) ? get_string(key) : fallback;
}

const GgufTensor* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensor& GgufFile::tensor(const std::string& name) const {
  const GgufTensor* t = find_tensor(name);
  if (!t) fail("missing required tensor '" + name + "'");
  return *t;
}

}  // namespace cs
