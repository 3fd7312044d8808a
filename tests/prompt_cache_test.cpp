// Prompt Cache on a tiny random model: module K/V encoded once at the
// schema's positions, served to prompts that import them (shared, never
// copied, batched wherever they sit), with exact results across batching and
// preemption; schema registration and its errors.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>
#include <optional>
#include <sstream>
#include <thread>

#include "engine/engine.h"
#include "cache/prefix_kv.h"
#include "engine_helpers.h"
#include "pml/encode.h"
#include "tiny_model.h"

namespace cs {
namespace {

using test::expect_same_tokens;
using test::run_all;
using test::run_each;
using test::words;

const LlamaModel& tiny() {
  static std::unique_ptr<LlamaModel> m = LlamaModel::load(test::tiny_model());
  return *m;
}

// A schema whose middle module `mid` follows a union, so prompts reach it
// after different modules (never as a shared prefix).
std::string schema_xml() {
  return "<schema name=\"s\"><system>" + words(70, 1) + "</system><user>" +
         "<union scaffold=\"u1\"><module name=\"u1\">" + words(30, 2) + "</module><module name=\"u2\">" + words(45, 3) +
         "</module></union>" + "<module name=\"mid\">" + words(90, 4) + " <parameter name=\"p\" length=\"24\"/> " +
         words(10, 5) + "</module><module name=\"tail\" cache=\"false\">" + words(12, 6) + "</module></user></schema>";
}

EngineOptions opts(int max_batch = 8) { return test::engine_options(AttnMode::kTpp, max_batch, 2); }

Request pml(const Engine& e, const std::string& xml, int max_tokens = 16, bool cache = true) {
  Request r = e.pml_request(xml, cache);
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  return r;
}

TEST(PromptCache, RegistersASchemaOnce) {
  Engine e(tiny(), opts());
  const SchemaInfo info = e.register_schema(pml::parse_schema(schema_xml(), "s.xml"));
  EXPECT_EQ(info.name, "s");
  EXPECT_EQ(info.scaffolds, 2);  // the default, and u2's
  EXPECT_GT(info.tokens, 150);
  ASSERT_TRUE(e.wait_idle(std::chrono::seconds(10)));
  const int pinned = e.stats().kv.pinned;
  EXPECT_GT(pinned, 0);
  EXPECT_EQ(e.schemas().size(), 1u);
  try {
    e.register_schema(pml::parse_schema(schema_xml(), "s.xml"));
    ADD_FAILURE() << "registered twice";
  } catch (const Error& err) {
    EXPECT_STREQ(err.what(), "a schema named 's' is already registered");
    EXPECT_EQ(err.kind(), ErrorKind::kExists);
  }
  try {
    e.pml_request("<prompt schema=\"t\"><a/></prompt>", true, "p.xml");
    ADD_FAILURE();
  } catch (const pml::PmlError& err) {
    EXPECT_STREQ(err.what(), "p.xml:1:1: the schema 't' is not registered");
    EXPECT_EQ(err.kind(), ErrorKind::kNotFound);
  }
  try {
    e.pml_request("<prompt schema=\"s\"><u1/><u2/></prompt>", true, "p.xml");
    ADD_FAILURE();
  } catch (const pml::PmlError& err) {
    EXPECT_NE(std::string(err.what()).find("'u2' and 'u1' are members of one union"), std::string::npos);
  }
  {
    Request r = pml(e, "<prompt schema=\"s\"><mid p=\"a cat\"/><user>is it</user></prompt>");
    RequestHandle h = e.submit(std::move(r));
    try {
      e.unregister_schema("s");
      ADD_FAILURE() << "unregistered while in use";
    } catch (const Error& err) {
      EXPECT_STREQ(err.what(), "schema 's' is in use by a request");
      EXPECT_EQ(err.kind(), ErrorKind::kInUse);
    }
    h.wait();
  }
  e.unregister_schema("s");
  EXPECT_EQ(e.stats().kv.pinned, 0);
  EXPECT_TRUE(e.schemas().empty());
  try {
    e.unregister_schema("s");
    ADD_FAILURE();
  } catch (const Error& err) {
    EXPECT_STREQ(err.what(), "no schema named 's' is registered");
    EXPECT_EQ(err.kind(), ErrorKind::kNotFound);
  }
}

// The K/V served for a module are, bit for bit, what the model computes for
// its scaffold at the same positions.
TEST(PromptCache, ModuleKvIsTheScaffoldsAtItsPositions) {
  const LlamaConfig& c = tiny().config();
  const KvLayout L{c.n_layers, c.n_kv_heads, c.head_dim, 64, KvType::kF16};
  PrefixKv tree(L, L.chunk_bytes() * 64, c.n_heads);
  const pml::TextModel tm = pml::text_model(tiny());
  const auto enc = pml::encode_schema(pml::parse_schema(schema_xml(), "s.xml"), tiny(), tree, tm);
  const pml::Layout& l = enc->layout;
  for (const char* owner : {"u1", "u2"}) {  // the default scaffold, then u2's
    SCOPED_TRACE(owner);
    // The scaffold's tokens and positions, computed directly.
    std::vector<int32_t> toks, pos;
    std::vector<int> first(l.segments.size(), -1);
    for (size_t g = 0; g < l.segments.size(); ++g) {
      const pml::Segment& s = l.segments[g];
      const std::string& m = l.modules[size_t(s.module)].name;
      if ((m == "u1" || m == "u2") && m != owner) continue;
      first[g] = int(toks.size());
      std::vector<int32_t> t = s.tokens;
      if (s.kind == pml::Segment::Kind::kParameter) t.assign(size_t(s.length), tm.pad);
      for (size_t i = 0; i < t.size(); ++i) toks.push_back(t[i]), pos.push_back(s.start + int32_t(i));
    }
    PrefixKv kv(L, L.chunk_bytes() * 16, c.n_heads);
    int m;
    ASSERT_TRUE(kv.join(0, {}, &m).ok());
    Batch b;
    for (size_t i = 0; i < toks.size(); ++i) b.add(toks[i], pos[i], 0, false);
    Workspace ws;
    std::vector<float> logits;
    tiny().forward(b, kv, ws, logits);
    int checked = 0;
    std::vector<float> k1(64), v1(64), k2(64), v2(64);
    // Read the pinned chunks back through a detached sequence that attaches
    // all of the owner's stored segments in order.
    ASSERT_TRUE(tree.join_detached(100).ok());
    int at = 0;
    for (size_t g = 0; g < l.segments.size(); ++g) {
      const std::string& name = l.modules[size_t(l.segments[g].module)].name;
      const bool owned = std::string(owner) == "u2" ? name == "u2" : name != "u2";
      if (enc->chunks[g].empty() || !owned) continue;
      int n = 0;
      for (ChunkId ch : enc->chunks[g]) n += tree.chunk_length(ch);
      const std::vector<int32_t> positions(size_t(n), 0);  // not read here
      ASSERT_TRUE(tree.attach(100, enc->chunks[g], positions).ok());
      ++checked;
      for (int i = 0; i < l.segments[g].length; ++i, ++at)
        for (int layer = 0; layer < L.n_layers; ++layer)
          for (int h = 0; h < L.n_kv_heads; ++h) {
            kv.read_kv(0, first[g] + i, layer, h, k1.data(), v1.data());
            tree.read_kv(100, at, layer, h, k2.data(), v2.data());
            ASSERT_EQ(k1, k2) << "segment " << g << " token " << i;
            ASSERT_EQ(v1, v2);
          }
    }
    ASSERT_TRUE(tree.leave(100).ok());
    EXPECT_GT(checked, 0);
  }
  pml::release_schema(tree, *enc);
  EXPECT_EQ(tree.stats().pinned, 0);
}

// Prompts importing the same middle module after different modules (so it is
// never a shared prefix): served together, each generates exactly what it
// generates alone; the module's chunks exist once, pinned; and preemption
// (a pool too small for all at once) changes nothing.
TEST(PromptCache, AMiddleModuleIsSharedAndExact) {
  const std::vector<std::string> prompts = {
      "<prompt schema=\"s\"><u1/><mid p=\"a cat\"/><user>is it on the mat</user></prompt>",
      "<prompt schema=\"s\"><u2/><mid p=\"the dog sat\"/><tail/><user>a cat</user></prompt>",
      "<prompt schema=\"s\"><mid/><user>the the</user></prompt>",
      "<prompt schema=\"s\"><u2/><mid p=\"on\"/><user>sat</user></prompt>",
  };
  Engine e(tiny(), opts());
  e.register_schema(pml::parse_schema(schema_xml(), "s.xml"));
  ASSERT_TRUE(e.wait_idle(std::chrono::seconds(10)));
  const int pinned = e.stats().kv.pinned;
  std::vector<Request> reqs;
  for (const auto& p : prompts) reqs.push_back(pml(e, p, 24));
  const auto alone = run_each(e, reqs);
  const auto together = run_all(e, reqs);
  expect_same_tokens(together, alone, "batched vs alone");
  ASSERT_TRUE(e.wait_idle(std::chrono::seconds(10)));
  EXPECT_EQ(e.stats().kv.pinned, pinned);  // nothing copied
  EXPECT_EQ(e.stats().kv.used, 0);
  // Only the new text and parameter values were computed.
  for (size_t i = 0; i < reqs.size(); ++i) {
    int cached = 0;
    for (const CachedSpan& s : reqs[i].cached) cached += s.end - s.begin;
    EXPECT_GT(cached, 100) << prompts[i];
  }
  // n = 2 forks from one assembled prefill; a tight pool preempts.
  Request two = pml(e, prompts[0], 24);
  two.n = 2;
  const Result r2 = e.submit(two).wait();
  EXPECT_EQ(r2.completions[0].tokens, alone[0].completions[0].tokens);
  EXPECT_EQ(r2.completions[1].tokens, alone[0].completions[0].tokens);
}

TEST(PromptCache, PreemptedPromptsGiveTheSameTokens) {
  Engine probe(tiny(), opts());
  probe.register_schema(pml::parse_schema(schema_xml(), "s.xml"));
  ASSERT_TRUE(probe.wait_idle(std::chrono::seconds(10)));
  // Room for the schema, its encoding and a little more: the prompts' own
  // chunks overflow. (Encoding runs on a scratch cache of its own.)
  EngineOptions o = opts();
  o.kv_memory = size_t(probe.stats().kv.pinned + 6) * probe.stats().kv.chunk_bytes;
  Engine tight(tiny(), o);
  tight.register_schema(pml::parse_schema(schema_xml(), "s.xml"));
  std::vector<Request> reqs, ref_reqs;
  for (int i = 0; i < 6; ++i) {
    const std::string p = "<prompt schema=\"s\"><u" + std::to_string(1 + i % 2) + "/><mid p=\"" + words(1 + i, i) +
                          "\"/><user>" + words(5, i) + "</user></prompt>";
    reqs.push_back(pml(tight, p, 100));
    ref_reqs.push_back(pml(probe, p, 100));
  }
  const auto got = run_all(tight, reqs);
  ASSERT_TRUE(tight.wait_idle(std::chrono::seconds(30)));
  EXPECT_GT(tight.stats().preemptions, 0u);
  expect_same_tokens(got, run_each(probe, ref_reqs), "preempted vs alone");
}

// A schema of ~1500 tokens to encode: a system part and a union of three
// members, so three scaffolds.
std::string big_schema_xml(const std::string& name) {
  return "<schema name=\"" + name + "\"><system>" + words(250, 1) + "</system><user><union scaffold=\"a\">" +
         "<module name=\"a\">" + words(150, 2) + "</module><module name=\"b\">" + words(160, 3) +
         "</module><module name=\"c\">" + words(170, 4) + "</module></union></user></schema>";
}

std::string file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

Request chat(const std::vector<int32_t>& prompt) {
  Request r;
  r.prompt = prompt;
  r.max_tokens = 4;
  r.ignore_eos = true;
  return r;
}

// Encoding runs inside the engine's steps (at least half of each step's
// tokens): a request submitted once a long encoding has started finishes
// before it ends, with the tokens it gets alone; a second registration of the
// name is refused at once; and the schema's K/V are bit for bit those of an
// encoding with nothing else running, sliced differently.
TEST(EngineThreads, RequestsKeepRunningWhileASchemaEncodes) {
  EngineOptions o = opts();
  o.step_tokens = 64;
  o.threads = 1;  // this suite runs under ThreadSanitizer, which cannot see OpenMP's pool
  Engine busy(tiny(), o);
  const std::vector<int32_t> prompt = tiny().tokenizer().encode(words(12, 7), false, true);
  std::optional<RequestHandle> h;
  std::promise<void> started;
  int total = 0, done_when_chat_ended = -1, calls = 0;
  auto progress = [&](int done, int t) {  // on the engine thread, after each step
    total = t;
    if (calls++ == 0) {
      h = busy.submit(chat(prompt));
      started.set_value();
    } else if (done_when_chat_ended < 0 && h->wait_for(std::chrono::milliseconds(0))) {
      done_when_chat_ended = done;
    }
  };
  std::thread registering([&] { busy.register_schema(pml::parse_schema(big_schema_xml("big"), "b.xml"), progress); });
  started.get_future().wait();
  try {
    busy.register_schema(pml::parse_schema(big_schema_xml("big"), "b.xml"));
    ADD_FAILURE() << "registered while the first is encoding";
  } catch (const Error& err) {
    EXPECT_STREQ(err.what(), "a schema named 'big' is already registered");
  }
  registering.join();
  EXPECT_GT(total, 1400);
  EXPECT_GT(calls, total / 64);  // slices of at most a step
  EXPECT_GT(done_when_chat_ended, 0) << "the request did not finish before the encoding";
  EXPECT_LT(done_when_chat_ended, total - 500);
  const Result during = h->wait();
  EXPECT_GE(busy.stats().schema_tokens, uint64_t(total));
  EXPECT_EQ(busy.stats().encoding, 0);

  o.step_tokens = 512;
  Engine idle(tiny(), o);
  idle.register_schema(pml::parse_schema(big_schema_xml("big"), "b.xml"));
  const Result alone = idle.submit(chat(prompt)).wait();
  EXPECT_EQ(during.completions.at(0).tokens, alone.completions.at(0).tokens);
  const std::string dir = testing::TempDir() + "/prompt_cache_interleaved";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir + "/busy");
  std::filesystem::create_directories(dir + "/idle");
  busy.save_schema("big", dir + "/busy");
  idle.save_schema("big", dir + "/idle");
  const std::string kv = file_bytes(dir + "/busy/big/chunks.bin");
  EXPECT_GT(kv.size(), 0u);
  EXPECT_TRUE(kv == file_bytes(dir + "/idle/big/chunks.bin")) << "the K/V differ";
}

// A pool too small for a schema: kNoRoom naming it, nothing left pinned, and
// the name free again.
TEST(PromptCache, ASchemaThePoolCannotHoldIsRefused) {
  const LlamaConfig& c = tiny().config();
  const KvLayout L{c.n_layers, c.n_kv_heads, c.head_dim, 64, KvType::kF16};
  EngineOptions o = opts();
  o.kv_memory = L.chunk_bytes() * 3;
  Engine e(tiny(), o);
  try {
    e.register_schema(pml::parse_schema(schema_xml(), "s.xml"));
    ADD_FAILURE();
  } catch (const Error& err) {
    EXPECT_EQ(err.kind(), ErrorKind::kNoRoom);
    EXPECT_NE(std::string(err.what()).find("the KV pool has no room for schema 's' ("), std::string::npos) << err.what();
  }
  EXPECT_EQ(e.stats().kv.pinned, 0);
  EXPECT_TRUE(e.schemas().empty());
  e.register_schema(pml::parse_schema("<schema name=\"s\">the cat</schema>", "small.xml"));
  EXPECT_EQ(e.schemas().size(), 1u);
}

// An engine stopping during an encoding fails the registration and unpins
// what the encoding pinned.
TEST(EngineThreads, StoppingFailsAnEncodingInProgress) {
  EngineOptions o = opts();
  o.step_tokens = 64;
  o.threads = 1;
  Engine e(tiny(), o);
  std::string message;
  try {
    e.register_schema(pml::parse_schema(big_schema_xml("big"), "b.xml"), [&](int done, int) {
      if (done > 700) e.shutdown();  // past the first scaffold: some chunks are pinned
    });
  } catch (const Error& err) {
    message = err.what();
  }
  EXPECT_EQ(message, "the engine stopped");
  EXPECT_THROW(e.register_schema(pml::parse_schema(big_schema_xml("big"), "b.xml")), Error);
  EXPECT_EQ(e.stats().kv.pinned, 0);
  EXPECT_TRUE(e.schemas().empty());
}

}  // namespace
}  // namespace cs

namespace cs {
namespace {

// Errors of work run on the engine thread (schema encoding, unregistering)
// reach callers on many threads at once, each as its own exception with its
// message and, for PML, its type and location (run under ThreadSanitizer in
// CI: the exception objects must not be shared between threads).
TEST(EngineThreads, SchemaErrorsReachEveryCallingThread) {
  EngineOptions o = opts();
  o.threads = 1;
  Engine e(tiny(), o);
  const std::string too_long =
      "<schema name=\"x\">\n<module name=\"m\">the cat <parameter name=\"p\" length=\"1\" scaffold=\"the cat sat\"/>"
      "</module></schema>";
  std::atomic<int> wrong{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c)
    callers.emplace_back([&, c] {
      for (int i = 0; i < 20; ++i) {
        const std::string name = "nope" + std::to_string(c);
        try {
          e.unregister_schema(name);
          ++wrong;
        } catch (const Error& err) {
          if (std::string(err.what()) != "no schema named '" + name + "' is registered") ++wrong;
        }
        try {
          e.register_schema(pml::parse_schema(too_long, "x.xml"));
          ++wrong;
        } catch (const Error& err) {  // across the engine's boundary: its status, location apart
          if (err.status().location != "x.xml:2:26" || err.kind() != ErrorKind::kInvalid ||
              err.status().message != "parameter 'p' has a scaffold of 12 tokens, more than its length 1" ||
              std::string(err.what()) != "x.xml:2:26: parameter 'p' has a scaffold of 12 tokens, more than its length 1")
            ++wrong;
        }
      }
    });
  for (auto& t : callers) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_TRUE(e.schemas().empty());
}

}  // namespace
}  // namespace cs
