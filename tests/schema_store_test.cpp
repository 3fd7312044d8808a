// Saved Prompt Cache schemas on a tiny random model: a schema saved by one
// engine and loaded by another (no model run) serves the same K/V bytes and
// the same tokens; saved copies for another model or KV layout are stale and
// encoded again; damaged files are errors naming the file, skipped at
// start-up and left on disk.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "engine/engine.h"
#include "engine/schema_dir.h"
#include "engine_helpers.h"
#include "pml/store.h"
#include "tiny_model.h"

namespace cs {
namespace {

namespace fs = std::filesystem;

const LlamaModel& tiny() {
  static std::unique_ptr<LlamaModel> m = LlamaModel::load(test::tiny_model());
  return *m;
}

const char* kSchema =
    "<schema name=\"s\"><system>the cat sat on the mat is a dog</system><user><union scaffold=\"u1\">"
    "<module name=\"u1\">a dog is on the mat the cat sat</module><module name=\"u2\">the mat is a cat on a dog</module>"
    "</union><module name=\"mid\">on the mat sat the dog a cat is <parameter name=\"p\" length=\"8\"/> the end</module>"
    "</user></schema>";
const char* kPrompts[] = {"<prompt schema=\"s\"><u2/><mid p=\"a cat\"/><user>is it</user></prompt>",
                          "<prompt schema=\"s\"><u1/><mid p=\"dog\"/><user>the mat</user></prompt>"};

// A fresh directory for one test.
std::string temp_dir(const std::string& name) {
  const std::string d = testing::TempDir() + "/schema_store_" + name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::vector<std::vector<int32_t>> generate_all(Engine& e) {
  std::vector<std::vector<int32_t>> out;
  for (const char* p : kPrompts) {
    Request r = e.pml_request(p, true);
    r.max_tokens = 12;
    r.ignore_eos = true;
    out.push_back(e.submit(std::move(r)).wait().completions.at(0).tokens);
  }
  return out;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(SchemaStore, ALoadedSchemaServesTheSameBytesAndTokens) {
  const std::string dir = temp_dir("same");
  const EngineOptions o = test::engine_options(AttnMode::kTpp, 4, 2);
  Engine a(tiny(), o);
  const SchemaInfo encoded = register_saved_schema(a, pml::parse_schema(kSchema, "s.xml"), dir);
  EXPECT_FALSE(encoded.restored);
  ASSERT_TRUE(fs::exists(dir + "/s/manifest.json"));
  ASSERT_TRUE(fs::exists(dir + "/s/chunks.bin"));
  EXPECT_EQ(fs::file_size(dir + "/s/chunks.bin"), encoded.bytes);
  const auto expected = generate_all(a);

  Engine b(tiny(), o);
  const SchemaInfo loaded = b.load_schema(dir + "/s");
  EXPECT_TRUE(loaded.restored);
  EXPECT_EQ(loaded.tokens, encoded.tokens);
  EXPECT_EQ(loaded.bytes, encoded.bytes);
  EXPECT_EQ(loaded.scaffolds, encoded.scaffolds);
  EXPECT_EQ(generate_all(b), expected);
  // Saving the loaded schema writes the same bytes again.
  const std::string dir2 = temp_dir("same2");
  b.save_schema("s", dir2);
  std::ifstream x(dir + "/s/chunks.bin", std::ios::binary), y(dir2 + "/s/chunks.bin", std::ios::binary);
  EXPECT_TRUE(std::equal(std::istreambuf_iterator<char>(x), {}, std::istreambuf_iterator<char>(y), {}));

  // register_saved_schema finds the saved copy of the same PML: no encoding.
  Engine c(tiny(), o);
  EXPECT_TRUE(register_saved_schema(c, pml::parse_schema(kSchema, "s.xml"), dir).restored);
  EXPECT_EQ(generate_all(c), expected);
  // A changed schema of the same name is encoded and saved over it.
  Engine d(tiny(), o);
  std::string changed = kSchema;
  changed.replace(changed.find("the end"), 7, "the start");
  EXPECT_FALSE(register_saved_schema(d, pml::parse_schema(changed, "s.xml"), dir).restored);
  Engine e(tiny(), o);
  EXPECT_TRUE(register_saved_schema(e, pml::parse_schema(changed, "s.xml"), dir).restored);
}

TEST(SchemaStore, StaleCopiesAreEncodedAgain) {
  const std::string dir = temp_dir("stale");
  Engine a(tiny(), test::engine_options(AttnMode::kTpp, 4, 2));
  a.register_schema(pml::parse_schema(kSchema, "s.xml"));
  a.save_schema("s", dir);

  // Another KV type: the bytes are not this engine's.
  EngineOptions f32 = test::engine_options(AttnMode::kTpp, 4, 2);
  f32.kv_type = KvType::kF32;
  Engine b(tiny(), f32);
  try {
    b.load_schema(dir + "/s");
    ADD_FAILURE() << "loaded f16 chunks into an f32 pool";
  } catch (const pml::StaleSchema& s) {
    EXPECT_NE(std::string(s.what()).find("saved for the KV layout"), std::string::npos) << s.what();
    EXPECT_EQ(s.name(), "s");
  }
  const auto entries = restore_schema_dir(b, dir);
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].what, SchemaDirEntry::What::kEncoded);
  EXPECT_NE(entries[0].message.find("saved for the KV layout"), std::string::npos);
  // ... and saved over: the next f32 engine loads it.
  Engine b2(tiny(), f32);
  EXPECT_TRUE(b2.load_schema(dir + "/s").restored);

  // Another model file (same shape, other weights).
  const auto other = LlamaModel::load(test::tiny_model("tiny_seed2", {.seed = 2}));
  Engine c(*other, f32);
  const std::string msg = message_of([&] { c.load_schema(dir + "/s"); });
  EXPECT_NE(msg.find("saved for the model cs_tiny.gguf"), std::string::npos) << msg;
}

TEST(SchemaStore, DamagedFilesAreErrorsAndSkipped) {
  const std::string dir = temp_dir("damaged");
  {
    Engine a(tiny(), test::engine_options(AttnMode::kTpp, 4, 2));
    a.register_schema(pml::parse_schema(kSchema, "s.xml"));
    a.save_schema("s", dir);
    a.register_schema(pml::parse_schema("<schema name=\"t\"><system>the cat</system></schema>", "t.xml"));
    a.save_schema("t", dir);
  }
  Engine b(tiny(), test::engine_options(AttnMode::kTpp, 4, 2));
  const std::string bin = dir + "/s/chunks.bin";
  const auto size = fs::file_size(bin);
  {  // one byte changed
    std::fstream f(bin, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x7f');
  }
  EXPECT_EQ(message_of([&] { b.load_schema(dir + "/s"); }), bin + ": damaged (its SHA-256 is not the manifest's)");
  fs::resize_file(bin, size - 10);
  EXPECT_EQ(message_of([&] { b.load_schema(dir + "/s"); }),
            bin + ": " + std::to_string(size - 10) + " bytes, the manifest's segments need " + std::to_string(size));
  fs::create_directories(dir + "/u");
  std::ofstream(dir + "/u/manifest.json") << "{\"name\": ";
  EXPECT_NE(message_of([&] { b.load_schema(dir + "/u"); }).find(dir + "/u/manifest.json: not a manifest"),
            std::string::npos);
  std::ofstream(dir + "/u/manifest.json") << "{\"name\": \"u\"}";
  EXPECT_NE(message_of([&] { b.load_schema(dir + "/u"); }).find(dir + "/u/manifest.json: malformed manifest"),
            std::string::npos);
  // At start-up: the good one is loaded, the damaged ones skipped and kept.
  const auto entries = restore_schema_dir(b, dir);
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries[0].what, SchemaDirEntry::What::kSkipped);  // s
  EXPECT_EQ(entries[1].what, SchemaDirEntry::What::kLoaded);   // t
  EXPECT_EQ(entries[1].name, "t");
  EXPECT_EQ(entries[2].what, SchemaDirEntry::What::kSkipped);  // u
  EXPECT_TRUE(fs::exists(bin));
  EXPECT_EQ(b.schemas().size(), 1u);
  // A name that cannot be a directory.
  Engine c(tiny(), test::engine_options(AttnMode::kTpp, 4, 2));
  c.register_schema(pml::parse_schema("<schema name=\"../x\"><system>the cat</system></schema>", "x.xml"));
  EXPECT_EQ(message_of([&] { c.save_schema("../x", dir); }),
            "the schema name '../x' cannot be saved as a directory name");
}

}  // namespace
}  // namespace cs
