#include "model/gguf.h"

#include <gtest/gtest.h>

#include <random>

#include "base/error.h"
#include "gguf_writer.h"

namespace cs {
namespace {

using test::GgufWriter;

// A valid file with one value of every metadata type and two tensors.
GgufWriter full_file() {
  GgufWriter w;
  w.key("u8", 0), w.put<uint8_t>(200);
  w.key("i8", 1), w.put<int8_t>(-5);
  w.key("u16", 2), w.put<uint16_t>(60000);
  w.key("i16", 3), w.put<int16_t>(-300);
  w.kv_u32("u32", 4000000000u);
  w.key("i32", 5), w.put<int32_t>(-70000);
  w.kv_f32("f32", 1.5f);
  w.kv_bool("bool", true);
  w.kv_str("str", "hello");
  w.key("u64", 10), w.put<uint64_t>(1ull << 40);
  w.key("i64", 11), w.put<int64_t>(-(1ll << 40));
  w.key("f64", 12), w.put<double>(2.25);
  w.kv_strs("strs", {"a", "bc", ""});
  w.kv_f32s("nums", {1, 2, 3});
  // A nested array (array of 2 arrays of u8): validated and skipped.
  w.key("nested", 9), w.put<uint32_t>(9), w.put<uint64_t>(2);
  for (int k = 0; k < 2; ++k) w.put<uint32_t>(0), w.put<uint64_t>(1), w.put<uint8_t>(7);
  w.tensor("a", {4, 2}, 0, 0);    // F32, 32 bytes
  w.tensor("b", {32}, 8, 32);     // Q8_0, 34 bytes
  std::vector<uint8_t> data(32 + 34, 0);
  for (int i = 0; i < 8; ++i) {
    float f = float(i);
    std::memcpy(data.data() + 4 * i, &f, 4);
  }
  w.data(data);
  return w;
}

TEST(Gguf, ReadsEveryValueType) {
  GgufFile f(full_file().write("full"));
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.get_uint("u8"), 200u);
  EXPECT_EQ(f.get_int("i8"), -5);
  EXPECT_EQ(f.get_uint("u16"), 60000u);
  EXPECT_EQ(f.get_int("i16"), -300);
  EXPECT_EQ(f.get_uint("u32"), 4000000000u);
  EXPECT_EQ(f.get_int("i32"), -70000);
  EXPECT_FLOAT_EQ(float(f.get_float("f32")), 1.5f);
  EXPECT_TRUE(f.get_bool("bool"));
  EXPECT_EQ(f.get_string("str"), "hello");
  EXPECT_EQ(f.get_uint("u64"), 1ull << 40);
  EXPECT_EQ(f.get_int("i64"), -(1ll << 40));
  EXPECT_DOUBLE_EQ(f.get_float("f64"), 2.25);
  EXPECT_EQ(f.get_strings("strs"), (std::vector<std::string>{"a", "bc", ""}));
  EXPECT_EQ(f.get_numbers("nums"), (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(f.metadata().at("nested").array_len, 2u);
  EXPECT_EQ(f.get_uint("absent", 9), 9u);
}

TEST(Gguf, TensorInfosAndData) {
  GgufFile f(full_file().write("tensors"));
  ASSERT_EQ(f.tensors().size(), 2u);
  const GgufTensor& a = f.tensor("a");
  EXPECT_EQ(a.n_dims, 2u);
  EXPECT_EQ(a.ne[0], 4);
  EXPECT_EQ(a.ne[1], 2);
  EXPECT_EQ(a.n_bytes, 32u);
  float v[8];
  std::memcpy(v, a.data, 32);
  EXPECT_EQ(v[7], 7.0f);
  EXPECT_EQ(f.tensor("b").type, GgmlType::Q8_0);
  EXPECT_EQ(f.tensor("b").n_bytes, 34u);
  EXPECT_EQ(f.find_tensor("zzz"), nullptr);
}

TEST(Gguf, Version2IsAccepted) {
  GgufWriter w(2);
  w.kv_str("k", "v");
  EXPECT_EQ(GgufFile(w.write("v2")).version(), 2u);
}

// Every error names the file and the problem.
void expect_error(const std::string& path, const std::string& needle) {
  try {
    GgufFile f(path);
    FAIL() << "expected an error containing '" << needle << "'";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
  }
}

TEST(Gguf, BadMagic) { expect_error(GgufWriter(3, 0x12345678).write("magic"), "bad magic"); }

TEST(Gguf, UnsupportedVersion) {
  expect_error(GgufWriter(1).write("v1"), "unsupported GGUF version 1");
  expect_error(GgufWriter(4).write("v4"), "unsupported GGUF version 4");
}

TEST(Gguf, MissingFile) { expect_error("/nonexistent/dir/x.gguf", "cannot open"); }

TEST(Gguf, EmptyFile) { expect_error(GgufWriter::write_bytes("empty", {}), "bad magic"); }

// Cutting the file at every length is an error, never a crash.
TEST(Gguf, TruncatedAtEveryLength) {
  const auto b = full_file().bytes();
  for (size_t n = 0; n + 1 < b.size(); ++n) {
    const std::string path =
        GgufWriter::write_bytes("trunc", std::vector<uint8_t>(b.begin(), b.begin() + long(n)));
    EXPECT_THROW(GgufFile f(path), Error) << "length " << n;
  }
}

// Random corruption anywhere in a valid file: parsing either succeeds or
// throws cs::Error; it never crashes or reads out of bounds (ASan in CI).
TEST(Gguf, RandomCorruptionIsAnErrorNotACrash) {
  const auto good = full_file().bytes();
  std::mt19937 rng(17);
  int errors = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    auto b = good;
    for (int k = 1 + int(rng() % 4); k > 0; --k) b[rng() % b.size()] = uint8_t(rng());
    const std::string path = GgufWriter::write_bytes("fuzz", b);
    try {
      GgufFile f(path);
      // Touch every byte the file claims as tensor data: ASan flags any that
      // lies outside the mapping.
      unsigned sum = 0;
      for (const auto& t : f.tensors())
        for (uint64_t i = 0; i < t.n_bytes; ++i) sum += t.data[i];
      (void)sum;
    } catch (const Error&) {
      ++errors;
    }
  }
  EXPECT_GT(errors, 100);  // most corruptions are caught
}

TEST(Gguf, HugeCountsAreRejectedBeforeAllocating) {
  GgufWriter w;
  auto b = w.bytes();
  const uint64_t huge = 1ull << 60;
  std::memcpy(b.data() + 16, &huge, 8);
  expect_error(GgufWriter::write_bytes("hugekv", b), "metadata count");
  GgufWriter s;
  s.key("x", 8), s.put<uint64_t>(1ull << 62);  // string longer than the file
  expect_error(s.write("hugestr"), "truncated");
  GgufWriter a;
  a.key("x", 9), a.put<uint32_t>(4), a.put<uint64_t>(1ull << 61);
  expect_error(a.write("hugearr"), "exceeds file size");
}

TEST(Gguf, TensorDataOutOfBounds) {
  GgufWriter w;
  w.tensor("t", {8}, 0, 0);  // needs 32 bytes
  w.data(std::vector<uint8_t>(16));
  expect_error(w.write("oob"), "outside the file");
  GgufWriter o;
  o.tensor("t", {8}, 0, 1ull << 62);
  o.data(std::vector<uint8_t>(32));
  expect_error(o.write("oob2"), "outside the file");
}

TEST(Gguf, UnknownTensorType) {
  GgufWriter w;
  w.tensor("t", {32}, 99, 0);
  w.data(std::vector<uint8_t>(64));
  expect_error(w.write("type"), "tensor 't' has unknown type id 99 (supported: F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, "
                                "Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, BF16, MXFP4)");
  GgufWriter iq;
  iq.tensor("blk.0.ffn_down.weight", {256}, 17, 0);
  iq.data(std::vector<uint8_t>(256));
  expect_error(iq.write("type_iq"), "tensor 'blk.0.ffn_down.weight' has type IQ2_XS, which chunkserve does not support");
}

TEST(Gguf, BadShapesAndOffsets) {
  GgufWriter w;
  w.tensor("t", {0}, 0, 0);
  expect_error(w.write("zero"), "invalid shape");
  GgufWriter d;
  d.tensor("t", {1, 1, 1, 1, 1}, 0, 0);
  expect_error(d.write("dims"), "5 dimensions");
  GgufWriter q;
  q.tensor("t", {33}, 3, 0);  // Q4_1 row not a whole block
  expect_error(q.write("block"), "not a multiple");
  GgufWriter a;
  a.tensor("t", {1}, 0, 4);
  expect_error(a.write("align"), "not aligned");
  GgufWriter dup;
  dup.tensor("t", {1}, 0, 0);
  dup.tensor("t", {1}, 0, 32);
  dup.data(std::vector<uint8_t>(64));
  expect_error(dup.write("dup"), "duplicate tensor");
}

TEST(Gguf, BadMetadata) {
  GgufWriter w;
  w.key("k", 77), w.put<uint32_t>(0);
  expect_error(w.write("vtype"), "unknown value type 77");
  GgufWriter a;
  a.kv_u32("general.alignment", 3);
  expect_error(a.write("alignment"), "not a power of two");
  GgufWriter d;
  d.kv_u32("k", 1), d.kv_u32("k", 2);
  expect_error(d.write("dupkey"), "duplicate metadata key");
}

// Names in messages come from the file: a NUL or a control byte in a key is
// shown escaped, so the message is not cut short when printed.
TEST(Gguf, ControlBytesInNamesAreEscaped) {
  GgufWriter w;
  w.key(std::string("bad\0key\n", 8), 77), w.put<uint32_t>(0);
  expect_error(w.write("nulkey"), "metadata key 'bad\\x00key\\x0a' has unknown value type 77");
}

TEST(Gguf, MissingAndMistypedKeys) {
  GgufWriter w;
  w.kv_str("s", "x");
  GgufFile f(w.write("keys"));
  try {
    f.get_uint("llama.block_count");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing required key 'llama.block_count'"), std::string::npos);
  }
  EXPECT_THROW(f.get_uint("s"), Error);
  EXPECT_THROW(f.get_strings("s"), Error);
  EXPECT_THROW(f.tensor("nope"), Error);
}

}  // namespace
}  // namespace cs
