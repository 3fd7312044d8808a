// The disk tier (kv/disk_tier.h): its file format against every kind of
// damage, its index across restarts, its LRU, a directory it cannot write;
// the tree's adopt(); and the engine on a tiny model with a small pool, whose
// greedy tokens stay those of an engine without the tier while prompts go to
// disk and come back, across a restart, with damaged files, and under
// another KV layout.
#include "kv/disk_tier.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <filesystem>
#include <thread>
#include <fstream>
#include <random>

#include "engine/engine.h"
#include "engine_helpers.h"
#include "kv/kv_file.h"
#include "cache/disk_staging.h"
#include "kv/host_tree.h"
#include "tiny_model.h"

namespace cs {
namespace {

namespace fs = std::filesystem;

// A fresh directory, removed at the end of the test.
struct TempDir {
  fs::path path;
  TempDir() {
    static int n = 0;
    path = fs::temp_directory_path() / ("cs_disk_" + std::to_string(::getpid()) + "_" + std::to_string(++n));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string str() const { return path.string(); }
};

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> b(n);
  for (auto& x : b) x = uint8_t(rng());
  return b;
}

// ---- The file format ----

TEST(KvFile, RoundTripsAndNamesEveryDamage) {
  KvFileHeader h;
  h.root = {1, 2};
  h.key = {3, 4};
  h.parent = {5, 6};
  const std::vector<int32_t> tokens = {7, -1, 100000, 0};
  const std::vector<uint8_t> data = random_bytes(300, 1);
  const std::vector<uint8_t> file = encode_kv_file(h, tokens, data);
  ASSERT_EQ(file.size(), kKvFileHeaderBytes + 16 + 300 + 8);
  KvFileHeader got;
  std::vector<int32_t> t;
  std::span<const uint8_t> d;
  ASSERT_EQ(check_kv_file(file, &got, &t, &d), KvFileError::kNone);
  EXPECT_EQ(got.key, h.key);
  EXPECT_EQ(got.parent, h.parent);
  EXPECT_EQ(got.root, h.root);
  EXPECT_EQ(got.file_bytes(), file.size());
  EXPECT_EQ(t, tokens);
  EXPECT_TRUE(std::equal(d.begin(), d.end(), data.begin(), data.end()));
  // Any single flipped bit anywhere is found.
  std::mt19937 rng(7);
  for (int trial = 0; trial < 400; ++trial) {
    std::vector<uint8_t> bad = file;
    bad[rng() % bad.size()] ^= uint8_t(1u << (rng() % 8));
    EXPECT_NE(check_kv_file(bad, &got, &t, &d), KvFileError::kNone) << "trial " << trial;
  }
  // Every truncation, and a byte too many.
  for (size_t n = 0; n < file.size(); n += 7)
    EXPECT_NE(check_kv_file(std::span(file).first(n), &got, &t, &d), KvFileError::kNone) << n;
  std::vector<uint8_t> longer = file;
  longer.push_back(0);
  EXPECT_EQ(check_kv_file(longer, &got, &t, &d), KvFileError::kSize);
  std::vector<uint8_t> magic = file;
  magic[0] = 'X';
  EXPECT_EQ(check_kv_file(magic, &got, &t, &d), KvFileError::kMagic);
  EXPECT_STREQ(kv_file_error_name(KvFileError::kChecksum), "checksum mismatch");
}

TEST(ChunkKey, ChainsAndPrintsAsHex) {
  const ChunkKey root = chunk_key_root("abc", "f16 chunk 64");
  EXPECT_NE(root, chunk_key_root("abd", "f16 chunk 64"));
  EXPECT_NE(root, chunk_key_root("abc", "f16 chunk 128"));
  const std::vector<int32_t> a = {1, 2, 3}, b = {1, 2, 4};
  EXPECT_NE(chunk_key(root, a), chunk_key(root, b));
  EXPECT_NE(chunk_key(chunk_key(root, a), b), chunk_key(chunk_key(root, b), a));
  const ChunkKey k = chunk_key(root, a);
  EXPECT_EQ(ChunkKey::from_hex(k.hex()), k);
  EXPECT_EQ(ChunkKey{}.hex(), std::string(32, '0'));
  EXPECT_EQ((ChunkKey{0x0123456789abcdefull, 0xfedcba9876543210ull}.hex()), "0123456789abcdeffedcba9876543210");
  EXPECT_FALSE(ChunkKey::from_hex("0123"));
  EXPECT_FALSE(ChunkKey::from_hex(std::string(31, '0') + "g"));
}

// ---- The tier ----

constexpr int kTokens = 4;
constexpr size_t kBytes = 256;

DiskTierOptions tier_options(const std::string& dir, uint64_t capacity = 1 << 20) {
  DiskTierOptions o;
  o.dir = dir;
  o.capacity_bytes = capacity;
  o.root = chunk_key_root("model", "layout");
  o.chunk_tokens = kTokens;
  o.chunk_bytes = kBytes;
  return o;
}

// A chain of n chunks under the root: token t of chunk i is 10 i + t.
std::vector<DiskWant> chain(const ChunkKey& root, int n) {
  std::vector<DiskWant> out;
  ChunkKey parent = root;
  for (int i = 0; i < n; ++i) {
    DiskWant w;
    for (int t = 0; t < kTokens; ++t) w.tokens.push_back(10 * i + t);
    w.parent = parent;
    w.key = chunk_key(parent, w.tokens);
    parent = w.key;
    out.push_back(w);
  }
  return out;
}

DiskLoad load_now(DiskTier& d, std::vector<DiskWant> want) {
  d.load(42, std::move(want));
  d.drain();
  auto got = d.take_loaded();
  EXPECT_EQ(got.size(), 1u);
  return got.empty() ? DiskLoad{} : std::move(got[0]);
}

TEST(DiskTier, StoresLoadsBitForBitAndSurvivesARestart) {
  TempDir dir;
  const DiskTierOptions o = tier_options(dir.str());
  const auto c = chain(o.root, 3);
  {
    DiskTier d(o);
    EXPECT_TRUE(d.stats().writable);
    for (int i = 0; i < 3; ++i) d.store(c[size_t(i)], random_bytes(kBytes, uint32_t(i)));
    d.drain();
    for (const auto& w : c) EXPECT_TRUE(d.has(w.key));
    const DiskLoad got = load_now(d, c);
    ASSERT_EQ(got.chunks.size(), 3u);
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(got.data[size_t(i)], random_bytes(kBytes, uint32_t(i)));
      EXPECT_EQ(got.chunks[size_t(i)].key, c[size_t(i)].key);
    }
    const DiskTierStats s = d.stats();
    EXPECT_EQ(s.files, 3u);
    EXPECT_EQ(s.written, 3u);
    EXPECT_EQ(s.loaded, 3u);
    EXPECT_EQ(s.bytes, 3 * (kKvFileHeaderBytes + 4 * kTokens + kBytes + 8));
    EXPECT_EQ(s.bytes_written, s.bytes);
    EXPECT_EQ(s.bytes_read, s.bytes);
  }
  // A new process: the index is rebuilt from the files.
  DiskTier again(o);
  EXPECT_EQ(again.stats().files, 3u);
  const DiskLoad got = load_now(again, c);
  ASSERT_EQ(got.chunks.size(), 3u);
  EXPECT_EQ(got.data[2], random_bytes(kBytes, 2));
  // Another model or layout sees none of it.
  DiskTierOptions other = tier_options(dir.str());
  other.root = chunk_key_root("model", "another layout");
  DiskTier stranger(other);
  EXPECT_EQ(stranger.stats().files, 0u);
  for (const auto& w : c) EXPECT_FALSE(stranger.has(w.key));
}

TEST(DiskTier, DamagedFilesAreRemovedAndNeverServed) {
  TempDir dir;
  const DiskTierOptions o = tier_options(dir.str());
  const auto c = chain(o.root, 4);
  std::string tier_path;
  {
    DiskTier d(o);
    for (int i = 0; i < 4; ++i) d.store(c[size_t(i)], random_bytes(kBytes, uint32_t(i)));
    d.drain();
    tier_path = d.path();
  }
  const auto file = [&](int i) { return tier_path + "/" + c[size_t(i)].key.hex() + ".kv"; };
  // A kill during a write leaves a temporary file (of a process that is
  // gone); a crash may cut one short. Another live server's is left alone.
  const std::string dead_tmp = tier_path + "/." + c[0].key.hex() + ".999999999.tmp";
  const std::string live_tmp = tier_path + "/." + c[0].key.hex() + "." + std::to_string(::getpid()) + ".tmp";
  std::ofstream(dead_tmp) << "half a chunk";
  std::ofstream(live_tmp) << "being written";
  fs::resize_file(file(3), fs::file_size(file(3)) - 5);
  // A flipped byte in the data (the header still parses): found when read.
  {
    std::fstream f(file(1), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(kKvFileHeaderBytes + 4 * kTokens + 10);
    f.put('\x5a');
  }
  DiskTier d(o);
  DiskTierStats s = d.stats();
  EXPECT_EQ(s.bad_files, 2u);  // the temporary file and the short one, at start-up
  EXPECT_EQ(s.files, 3u);      // the flipped byte is found only when the file is read
  EXPECT_FALSE(fs::exists(dead_tmp));
  EXPECT_TRUE(fs::exists(live_tmp));
  EXPECT_FALSE(fs::exists(file(3)));
  EXPECT_FALSE(d.has(c[3].key));
  // The run stops at the damaged chunk: only the one before it is served.
  const DiskLoad got = load_now(d, c);
  ASSERT_EQ(got.chunks.size(), 1u);
  EXPECT_EQ(got.data[0], random_bytes(kBytes, 0));
  s = d.stats();
  EXPECT_EQ(s.bad_files, 3u);
  EXPECT_FALSE(d.has(c[1].key));
  EXPECT_FALSE(fs::exists(file(1)));
  // The chunk after it will be computed again: out of the index, so that its
  // fresh copy replaces the file.
  EXPECT_FALSE(d.has(c[2].key));
  d.store(c[2], random_bytes(kBytes, 22));
  d.drain();
  EXPECT_TRUE(d.has(c[2].key));
  EXPECT_EQ(load_now(d, {c[2]}).data.at(0), random_bytes(kBytes, 22));
  // A chunk whose tokens are not the ones asked for is not served either.
  std::vector<DiskWant> wrong = {c[0]};
  wrong[0].tokens[0] = 999;
  EXPECT_TRUE(load_now(d, wrong).chunks.empty());
}

TEST(DiskTier, KeepsTheMostRecentlyUsedWithinItsSize) {
  TempDir dir;
  const uint64_t file_bytes = kKvFileHeaderBytes + 4 * kTokens + kBytes + 8;
  const DiskTierOptions o = tier_options(dir.str(), 3 * file_bytes);
  const auto c = chain(o.root, 5);
  std::string path;
  {
    DiskTier d(o);
    path = d.path();
    for (int i = 0; i < 3; ++i) d.store(c[size_t(i)], random_bytes(kBytes, uint32_t(i)));
    d.drain();
    // Storing chunk 0 again makes it the most recent; 1 is the oldest then.
    d.store(c[0], random_bytes(kBytes, 0));
    d.store(c[3], random_bytes(kBytes, 3));
    d.drain();
    EXPECT_TRUE(d.has(c[0].key));
    EXPECT_FALSE(d.has(c[1].key));
    EXPECT_TRUE(d.has(c[2].key));
    EXPECT_TRUE(d.has(c[3].key));
    EXPECT_FALSE(fs::exists(d.path() + "/" + c[1].key.hex() + ".kv"));
    const DiskTierStats s = d.stats();
    EXPECT_EQ(s.evicted, 1u);
    EXPECT_EQ(s.files, 3u);
    EXPECT_EQ(s.bytes, 3 * file_bytes);
  }
  // A restart keeps the budget too (oldest files first out).
  DiskTierOptions smaller = o;
  smaller.capacity_bytes = 2 * file_bytes;
  DiskTier again(smaller);
  again.drain();
  EXPECT_TRUE(again.stats().writable);
  EXPECT_EQ(again.stats().files, 2u);
  int left = 0;
  for (const auto& e : fs::directory_iterator(path)) ++left, (void)e;
  EXPECT_EQ(left, 2);
}

TEST(DiskTier, ADirectoryItCannotWriteTurnsWritingOff) {
  TempDir dir;
  const std::string not_a_dir = dir.str() + "/file";
  std::ofstream(not_a_dir) << "x";
  DiskTier d(tier_options(not_a_dir));
  const auto c = chain(d.root(), 1);
  d.store(c[0], random_bytes(kBytes, 0));
  d.drain();
  const DiskTierStats s = d.stats();
  EXPECT_FALSE(s.writable);
  EXPECT_EQ(s.write_errors, 1u);
  EXPECT_EQ(s.dropped, 1u);
  EXPECT_FALSE(d.has(c[0].key));
}

// DIR/<root> replaced by a link to another directory: the tier does not
// follow it (start-up once deleted every file of the link's target, then
// wrote chunks into it): writing off, the target as it was.
TEST(DiskTier, ALinkInPlaceOfItsDirectoryIsNotFollowed) {
  TempDir dir, victim;
  const DiskTierOptions o = tier_options(dir.str());
  std::ofstream(victim.str() + "/notes.txt") << "mine";
  std::ofstream(victim.str() + "/" + std::string(32, 'a') + ".kv") << "also mine";
  fs::create_symlink(victim.str(), dir.str() + "/" + o.root.hex());
  DiskTier d(o);
  const auto c = chain(o.root, 1);
  d.store(c[0], random_bytes(kBytes, 0));
  d.drain();
  const DiskTierStats s = d.stats();
  EXPECT_FALSE(s.writable);
  EXPECT_EQ(s.files, 0u);
  EXPECT_EQ(s.dropped, 1u);
  int left = 0;
  for (const auto& e : fs::directory_iterator(victim.str())) ++left, (void)e;
  EXPECT_EQ(left, 2);
  std::string text;
  std::getline(std::ifstream(victim.str() + "/notes.txt"), text);
  EXPECT_EQ(text, "mine");
}

// Start-up removes the tier's own leftovers only: a temporary file of a gone
// process and a chunk file of its own cut short. A file named like a chunk
// without the tier's header, one of another root, a link named like a chunk,
// a subdirectory and a stranger's file stay, counted and named in the log.
TEST(DiskTier, StartUpRemovesOnlyItsOwnFiles) {
  TempDir dir, outside;
  const DiskTierOptions o = tier_options(dir.str());
  const auto c = chain(o.root, 3);
  std::string tier;
  {
    DiskTier d(o);
    for (int i = 0; i < 3; ++i) d.store(c[size_t(i)], random_bytes(kBytes, uint32_t(i)));
    d.drain();
    tier = d.path();
  }
  const auto name = [](const ChunkKey& k) { return k.hex() + ".kv"; };
  fs::resize_file(tier + "/" + name(c[2].key), 40);                        // ours, cut short: removed
  std::ofstream(tier + "/." + c[0].key.hex() + ".999999999.tmp") << "x";   // ours, of a gone process: removed
  std::ofstream(tier + "/notes.txt") << "keep me";                          // a stranger's
  fs::create_directory(tier + "/sub");                                       // a subdirectory
  const ChunkKey k1{1, 1}, k2{2, 2}, k3{3, 3};
  std::ofstream(tier + "/" + name(k1)) << std::string(200, 'z');             // a chunk's name, not the tier's header
  std::ofstream(outside.str() + "/target") << "outside";
  fs::create_symlink(outside.str() + "/target", tier + "/" + name(k2));      // a link named like a chunk
  DiskTierOptions other = tier_options(dir.str());
  other.root = chunk_key_root("model", "another layout");
  {  // another root's file, copied in
    DiskTier d(other);
    d.store(chain(other.root, 1)[0], random_bytes(kBytes, 9));
    d.drain();
    fs::copy_file(d.path() + "/" + name(chain(other.root, 1)[0].key), tier + "/" + name(k3));
  }
  DiskTier d(o);
  const DiskTierStats s = d.stats();
  EXPECT_EQ(s.bad_files, 2u);
  EXPECT_EQ(s.foreign_files, 5u);
  EXPECT_EQ(s.files, 2u);
  EXPECT_FALSE(fs::exists(tier + "/" + name(c[2].key)));
  EXPECT_FALSE(fs::exists(tier + "/." + c[0].key.hex() + ".999999999.tmp"));
  for (const std::string& f : {std::string("notes.txt"), std::string("sub"), name(k1), name(k3)})
    EXPECT_TRUE(fs::exists(tier + "/" + f)) << f;
  EXPECT_TRUE(fs::is_symlink(tier + "/" + name(k2)));
  EXPECT_TRUE(fs::exists(outside.str() + "/target"));
  EXPECT_EQ(load_now(d, {c[0], c[1]}).chunks.size(), 2u);
}

// Two servers on one directory: the first holds it (writes, removes, keeps
// the size); the second reads what the first keeps and writes and removes
// nothing, so together they stay within the first one's size.
TEST(DiskTier, ASecondServerOnTheDirectoryOnlyReads) {
  TempDir dir;
  const uint64_t file_bytes = kKvFileHeaderBytes + 4 * kTokens + kBytes + 8;
  const DiskTierOptions o = tier_options(dir.str(), 4 * file_bytes);
  const auto c = chain(o.root, 4);
  DiskTier writer(o);
  for (int i = 0; i < 3; ++i) writer.store(c[size_t(i)], random_bytes(kBytes, uint32_t(i)));
  writer.drain();
  DiskTierOptions small = o;
  small.capacity_bytes = file_bytes;  // its own budget would evict two: a reader only stops serving them
  DiskTier reader(small);
  EXPECT_FALSE(reader.stats().writable);
  reader.store(c[3], random_bytes(kBytes, 3));
  reader.drain();
  EXPECT_EQ(reader.stats().dropped, 1u);
  EXPECT_FALSE(fs::exists(reader.path() + "/" + c[3].key.hex() + ".kv"));
  const DiskLoad got = load_now(reader, {c[2]});
  ASSERT_EQ(got.chunks.size(), 1u);
  EXPECT_EQ(got.data[0], random_bytes(kBytes, 2));
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(writer.has(c[size_t(i)].key));
    EXPECT_TRUE(fs::exists(writer.path() + "/" + c[size_t(i)].key.hex() + ".kv"));
  }
  writer.store(c[3], random_bytes(kBytes, 3));
  writer.drain();
  EXPECT_TRUE(writer.has(c[3].key));
}

TEST(DiskTier, AFullQueueDropsWritesInsteadOfWaiting) {
  TempDir dir;
  DiskTierOptions o = tier_options(dir.str());
  o.max_queued_bytes = 0;  // no room at all: every store is dropped
  DiskTier d(o);
  const auto c = chain(o.root, 2);
  d.store(c[0], random_bytes(kBytes, 0));
  d.drain();
  EXPECT_EQ(d.stats().dropped, 1u);
  EXPECT_FALSE(d.has(c[0].key));
}

// ---- The tree's side: its events and adopt; the staging beside it ----

KvLayout small_layout() { return {2, 1, 64, kTokens, KvType::kF32}; }

// What a subscriber hears, in order ("r 3": chunk 3 retained).
struct Recorder : TreeObserver {
  std::vector<std::string> heard;
  void grown(ChunkId, ChunkId, std::span<const int32_t>, int) override {}
  void removed(ChunkId c) override { heard.push_back("x " + std::to_string(c)); }
  void retained(ChunkId c) override { heard.push_back("r " + std::to_string(c)); }
  void shared(ChunkId c) override { heard.push_back("s " + std::to_string(c)); }
  void evicting(ChunkId c) override { heard.push_back("e " + std::to_string(c)); }
};

// Two full chunks and a partial one of sequence `id`, with K/V written:
// value of token i, layer l, dimension d: i * 100 + l * 10 + d (V: negated).
const std::vector<int32_t> kPrompt = {1, 2, 3, 4, 5, 6, 7, 8, 9};
void write_prompt(HostTree& t, SeqId id) {
  int matched = 0;
  ASSERT_TRUE(t.join(id, {}, &matched).ok());
  ASSERT_TRUE(t.append(id, kPrompt).ok());
  std::vector<float> k(64), v(64);
  for (int i = 0; i < 9; ++i)
    for (int l = 0; l < 2; ++l) {
      for (int d = 0; d < 64; ++d) k[size_t(d)] = float(i * 100 + l * 10 + d), v[size_t(d)] = -k[size_t(d)];
      t.write_kv(id, i, l, 0, k.data(), v.data());
    }
}

TEST(PrefixTreeEvents, KeptRootFirstEvictedLeavesFirstAndAdoptedBack) {
  HostTree t(small_layout(), 3 * small_layout().chunk_bytes());
  Recorder rec;
  t.observe(&rec);
  write_prompt(t, 1);
  const auto chunks = t.chunks_of(1);
  ASSERT_EQ(chunks.size(), 3u);
  const auto c = [&](int i) { return std::to_string(chunks[size_t(i)]); };
  ASSERT_TRUE(t.leave(1).ok());
  // Retained root first (a kill part-way keeps a prefix of the chain).
  EXPECT_EQ(rec.heard, (std::vector<std::string>{"r " + c(0), "r " + c(1), "r " + c(2)}));
  rec.heard.clear();
  EXPECT_EQ(t.evict(3), 3);
  EXPECT_EQ(rec.heard, (std::vector<std::string>{"e " + c(2), "x " + c(2), "e " + c(1), "x " + c(1), "e " + c(0),
                                                 "x " + c(0)}));
  EXPECT_EQ(t.stats().evicted, 3u);
  // Back: a chunk of the wrong length or under a partial parent is refused;
  // the chain comes back, a second adopt finds the first.
  EXPECT_EQ(t.adopt(kNoChunk, std::span(kPrompt).first(3)).first, kNoChunk);
  const auto [a0, fresh0] = t.adopt(kNoChunk, std::span(kPrompt).first(4));
  ASSERT_NE(a0, kNoChunk);
  EXPECT_TRUE(fresh0);
  EXPECT_EQ(t.adopt(kNoChunk, std::span(kPrompt).first(4)), std::make_pair(a0, false));
  const auto [a1, fresh1] = t.adopt(a0, std::span(kPrompt).subspan(4, 4));
  ASSERT_NE(a1, kNoChunk);
  EXPECT_TRUE(fresh1);
  EXPECT_EQ(t.stats().cached, 2);
  EXPECT_EQ(t.match(kPrompt), std::make_pair(a1, 8));
  t.unobserve(&rec);
}

TEST(PrefixTreeEvents, ASecondReaderSharesAPrefixOnce) {
  HostTree t(small_layout(), 8 * small_layout().chunk_bytes());
  Recorder rec;
  t.observe(&rec);
  write_prompt(t, 1);
  const auto chunks = t.chunks_of(1);
  EXPECT_TRUE(rec.heard.empty());
  int matched = 0;
  ASSERT_TRUE(t.join(2, kPrompt, &matched).ok());
  EXPECT_EQ(rec.heard, (std::vector<std::string>{"s " + std::to_string(chunks[0]), "s " + std::to_string(chunks[1])}));
  ASSERT_TRUE(t.join(3, kPrompt, &matched).ok());
  EXPECT_EQ(rec.heard.size(), 2u);
  // Leaving tells nothing of chunks others still read: only sequence 3's own
  // (its copy of the partial chunk) is retained.
  const ChunkId own = t.chunks_of(3).back();
  ASSERT_TRUE(t.leave(3).ok());
  EXPECT_EQ(rec.heard.size(), 3u);
  EXPECT_EQ(rec.heard.back(), "r " + std::to_string(own));
  t.unobserve(&rec);
}

TEST(DiskStaging, KeepsFullChunksByKeyAndBringsThemBackBitForBit) {
  TempDir dir;
  const KvLayout L = small_layout();
  DiskTierOptions o = tier_options(dir.str());
  o.chunk_bytes = L.chunk_bytes();
  DiskTier disk(o);
  HostTree t(L, 3 * L.chunk_bytes());
  DiskStaging staging(t, t.memory(), disk);
  write_prompt(t, 1);
  const ChunkKey k0 = chunk_key(o.root, std::span(kPrompt).first(4));
  const ChunkKey k1 = chunk_key(k0, std::span(kPrompt).subspan(4, 4));
  ASSERT_TRUE(t.leave(1).ok());
  disk.drain();
  EXPECT_TRUE(disk.has(k0));
  EXPECT_TRUE(disk.has(k1));
  EXPECT_EQ(disk.stats().written, 2u);  // the partial chunk has no key: not kept
  EXPECT_TRUE(staging.on_disk(t.match(kPrompt).first));
  EXPECT_EQ(t.evict(3), 3);
  // Evicted: offered again, and the tier keeps one copy.
  disk.drain();
  EXPECT_EQ(disk.stats().written, 2u);
  int from_disk = -1;
  EXPECT_EQ(staging.prepare(2, kPrompt, 3, &from_disk), SequenceCache::Prep::kLoading);
  disk.drain();
  staging.take_loads();
  EXPECT_EQ(staging.prepare(2, kPrompt, 1, &from_disk), SequenceCache::Prep::kNoRoom);  // two chunks to bring
  EXPECT_EQ(staging.prepare(2, kPrompt, 2, &from_disk), SequenceCache::Prep::kReady);
  EXPECT_EQ(from_disk, 8);
  int matched = 0;
  ASSERT_TRUE(t.join(2, kPrompt, &matched).ok());
  EXPECT_EQ(matched, 8);
  float gk[64], gv[64];
  t.read_kv(2, 6, 1, 0, gk, gv);
  EXPECT_EQ(gk[3], 6 * 100 + 10 + 3);
  EXPECT_EQ(gv[5], -(6 * 100 + 10 + 5));
  // A second reader stores a shared prefix (here already kept: no new file).
  ASSERT_TRUE(t.join(3, kPrompt, &matched).ok());
  disk.drain();
  EXPECT_EQ(disk.stats().written, 2u);
}

// ---- The engine ----

const LlamaModel& tiny() {
  static std::unique_ptr<LlamaModel> m = LlamaModel::load(test::tiny_model());
  return *m;
}

// Eight prompts of 200 to 270 tokens (3 or 4 full chunks each), all different
// from their first token.
std::vector<Request> distinct_prompts(int max_tokens = 12) {
  std::vector<Request> out;
  for (int i = 0; i < 8; ++i) {
    Request r;
    for (int t = 0; t < 200 + 10 * i; ++t) r.prompt.push_back(3 + (i * 37 + t * 11 + t / 5) % 268);
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    out.push_back(r);
  }
  return out;
}

// threads 1: the ThreadSanitizer run (libgomp is not instrumented).
EngineOptions disk_options(const std::string& dir, int chunks, int threads = 2) {
  EngineOptions o = test::engine_options(AttnMode::kTpp, 32, threads);
  Engine probe(tiny(), o);
  o.kv_memory = size_t(chunks) * probe.stats().kv.chunk_bytes;
  o.kv_disk = dir;
  return o;
}

std::vector<Result> reference(const std::vector<Request>& reqs, int threads = 2) {
  Engine alone(tiny(), test::engine_options(AttnMode::kNone, 1, threads));
  return test::run_each(alone, reqs);
}

TEST(EngineDisk, EvictedPromptsComeBackFromDiskWithTheSameTokens) {
  TempDir dir;
  const auto reqs = distinct_prompts();
  const auto ref = reference(reqs);
  // 12 chunks: two or three prompts at a time; the rest are evicted to disk.
  Engine e(tiny(), disk_options(dir.str(), 12));
  test::expect_same_tokens(test::run_each(e, reqs), ref, "first pass");
  const std::vector<Result> again = test::run_each(e, reqs);
  test::expect_same_tokens(again, ref, "from disk");
  ASSERT_TRUE(e.wait_idle(std::chrono::seconds(30)));
  const EngineStats s = e.stats();
  EXPECT_GT(s.kv.evicted, 0u);
  EXPECT_GT(s.disk.written, 0u);
  EXPECT_GT(s.disk.loaded, 0u);
  // The first prompts were evicted: every full chunk of the first came from disk.
  EXPECT_EQ(again[0].usage.disk_tokens, 192);
  EXPECT_EQ(again[0].usage.cached_tokens, 192);
  int disk = 0;
  for (const Result& r : again) disk += r.usage.disk_tokens;
  EXPECT_EQ(s.prompt_tokens_disk, uint64_t(disk));
  EXPECT_EQ(s.disk.bad_files, 0u);
  // Batched, with loads and prefills in one step: still the same tokens.
  test::expect_same_tokens(test::run_all(e, reqs), ref, "batched");
}

// A prefix held (a cache_control breakpoint) when the engine stops is let
// go while the disk tier still exists (before, its chunks left the tree
// after the tier was gone: a crash at every clean stop with a hold), and
// stored: the next start reads the prompt's full chunks from disk.
TEST(EngineDisk, APrefixHeldAtTheStopIsStoredForTheNextStart) {
  TempDir dir;
  const auto reqs = distinct_prompts(1);
  const auto ref = reference(reqs);
  {
    Engine e(tiny(), disk_options(dir.str(), 40));
    test::expect_same_tokens(test::run_each(e, reqs), ref, "first start");
    EXPECT_EQ(e.hold_prefix(reqs[0].prompt, std::chrono::hours(1)), 192);
    EXPECT_EQ(e.stats().held_chunks, 3);
  }
  Engine again(tiny(), disk_options(dir.str(), 40));
  const std::vector<Result> r = test::run_each(again, reqs);
  test::expect_same_tokens(r, ref, "next start");
  EXPECT_EQ(r[0].usage.disk_tokens, 192);
}

// Never stalls the batch: while one request's chunks are being read (held
// there by the test), another keeps decoding; released, the first is served
// from disk with its own tokens.
TEST(EngineDisk, ARequestWaitingForItsChunksDoesNotStopTheOthers) {
  TempDir dir;
  const auto reqs = distinct_prompts(8);
  const auto ref = reference({reqs[0]});
  std::mutex mu;
  std::condition_variable cv;
  bool hold = false, held = false;
  EngineOptions o = disk_options(dir.str(), 40);
  o.kv_disk_before_read = [&] {
    std::unique_lock lock(mu);
    held = true;
    cv.notify_all();
    cv.wait(lock, [&] { return !hold; });
  };
  Engine e(tiny(), o);
  e.submit(reqs[0]).wait();
  ASSERT_TRUE(e.wait_idle(std::chrono::seconds(30)));
  EXPECT_EQ(e.flush_cache(), 4);  // out of the pool; its 3 full chunks are on disk
  // The tier writes on its own thread: wait (bounded) for the files.
  for (int i = 0; i < 3000 && e.stats().disk.files < 3; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_GE(e.stats().disk.files, 3u);
  {
    std::lock_guard lock(mu);
    hold = true;
  }
  Request other = reqs[1];
  other.max_tokens = 30;
  RequestHandle b = e.submit(other);
  RequestHandle a = e.submit(reqs[0]);
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return held; }));
  }
  // The read is held: the other request decodes all of its tokens meanwhile.
  const Result rb = b.wait();
  EXPECT_EQ(rb.completions[0].tokens.size(), 30u);
  EXPECT_FALSE(a.done());
  EXPECT_EQ(e.stats().waiting, 1);
  {
    std::lock_guard lock(mu);
    hold = false;
  }
  cv.notify_all();
  const Result ra = a.wait();
  EXPECT_EQ(ra.completions[0].tokens, ref[0].completions[0].tokens);
  EXPECT_EQ(ra.usage.disk_tokens, 192);
}

// A prompt several requests ask for at once while it is on disk is read once.
TEST(EngineDisk, ConcurrentRequestsForOnePromptReadItOnce) {
  TempDir dir;
  const auto reqs = distinct_prompts(8);
  const auto ref = reference({reqs[0]});
  std::mutex mu;
  std::condition_variable cv;
  bool hold = false;
  EngineOptions o = disk_options(dir.str(), 40);
  o.kv_disk_before_read = [&] {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return !hold; });
  };
  Engine e(tiny(), o);
  e.submit(reqs[0]).wait();
  ASSERT_TRUE(e.wait_idle(std::chrono::seconds(30)));
  for (int i = 0; i < 3000 && e.stats().disk.files < 3; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  e.flush_cache();
  {
    std::lock_guard lock(mu);
    hold = true;  // all four arrive while the read is held
  }
  std::vector<RequestHandle> hs;
  for (int i = 0; i < 4; ++i) hs.push_back(e.submit(reqs[0]));
  for (int i = 0; i < 3000 && e.stats().waiting < 4; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(e.stats().waiting, 4);
  {
    std::lock_guard lock(mu);
    hold = false;
  }
  cv.notify_all();
  int disk = 0;
  for (auto& h : hs) {
    const Result r = h.wait();
    EXPECT_EQ(r.completions[0].tokens, ref[0].completions[0].tokens);
    EXPECT_GE(r.usage.cached_tokens, 192);
    disk += r.usage.disk_tokens;
  }
  EXPECT_EQ(disk, 192);  // one of them brought the chunks in; the others found them in the tree
  EXPECT_EQ(e.stats().disk.loads, 1u);
}

TEST(EngineDisk, ARestartServesKnownPromptsFromDisk) {
  TempDir dir;
  const auto reqs = distinct_prompts();
  const auto ref = reference(reqs);
  {
    Engine e(tiny(), disk_options(dir.str(), 40));
    test::expect_same_tokens(test::run_each(e, reqs), ref, "before the restart");
    ASSERT_TRUE(e.wait_idle(std::chrono::seconds(30)));
    EXPECT_EQ(e.stats().kv.evicted, 0u);  // all in the pool: written as they were retained
  }
  Engine e(tiny(), disk_options(dir.str(), 40));
  EXPECT_GE(e.stats().disk.files, 24u);
  const std::vector<Result> after = test::run_each(e, reqs);
  test::expect_same_tokens(after, ref, "after the restart");
  for (size_t i = 0; i < reqs.size(); ++i) {
    // Every full chunk of the prompt but the last token's.
    const int full = int((reqs[i].prompt.size() - 1) / 64 * 64);
    EXPECT_EQ(after[i].usage.disk_tokens, full) << i;
  }
}

TEST(EngineDisk, DamagedFilesAreRecomputedNotServed) {
  TempDir dir;
  const auto reqs = distinct_prompts();
  const auto ref = reference(reqs);
  { Engine e(tiny(), disk_options(dir.str(), 40)); test::run_each(e, reqs); }
  // Damage every file's data in one byte.
  int damaged = 0;
  for (const auto& sub : fs::directory_iterator(dir.path))
    for (const auto& f : fs::directory_iterator(sub.path())) {
      std::fstream s(f.path(), std::ios::in | std::ios::out | std::ios::binary);
      s.seekp(std::streamoff(fs::file_size(f.path()) / 2));
      s.put('\x01');
      ++damaged;
    }
  ASSERT_GT(damaged, 20);
  Engine e(tiny(), disk_options(dir.str(), 40));
  const std::vector<Result> after = test::run_each(e, reqs);
  test::expect_same_tokens(after, ref, "damaged files");
  for (const Result& r : after) EXPECT_EQ(r.usage.disk_tokens, 0);
  ASSERT_TRUE(e.wait_idle(std::chrono::seconds(30)));
  // The first chunk of each prompt is read, found bad and removed.
  EXPECT_EQ(e.stats().disk.bad_files, 8u);
}

TEST(EngineDisk, AnotherKvLayoutNeverMatches) {
  TempDir dir;
  const auto reqs = distinct_prompts();
  { Engine e(tiny(), disk_options(dir.str(), 40)); test::run_each(e, reqs); }
  EngineOptions o = disk_options(dir.str(), 40);
  o.kv_type = KvType::kF32;
  o.kv_memory *= 2;
  Engine e(tiny(), o);
  EXPECT_EQ(e.stats().disk.files, 0u);
  const Result r = e.submit(reqs[0]).wait();
  EXPECT_EQ(r.usage.disk_tokens, 0);
}

TEST(EngineDisk, AnUnwritableDirectoryLeavesServingAsItWas) {
  TempDir dir;
  const std::string not_a_dir = dir.str() + "/file";
  std::ofstream(not_a_dir) << "x";
  const auto reqs = distinct_prompts();
  Engine e(tiny(), disk_options(not_a_dir, 12));
  test::expect_same_tokens(test::run_each(e, reqs), reference(reqs), "no disk");
  ASSERT_TRUE(e.wait_idle(std::chrono::seconds(30)));
  EXPECT_FALSE(e.stats().disk.writable);
  EXPECT_EQ(e.stats().disk.write_errors, 1u);
  EXPECT_EQ(e.stats().prompt_tokens_disk, 0u);
}

// The tier's I/O thread beside the engine thread and concurrent clients, some
// cancelling while their chunks are read (the ThreadSanitizer run has it).
TEST(EngineThreads, DiskTierBesideConcurrentClients) {
  TempDir dir;
  const auto reqs = distinct_prompts(4);
  const auto ref = reference(reqs, 1);
  EngineOptions o = disk_options(dir.str(), 12, 1);
  o.max_batch = 4;
  Engine e(tiny(), o);
  std::atomic<int> same{0}, cancelled{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 4; ++c)
    clients.emplace_back([&, c] {
      for (int i = 0; i < 6; ++i) {
        const size_t k = size_t(c * 3 + i) % reqs.size();
        RequestHandle h = e.submit(reqs[k]);
        if ((c + i) % 4 == 3) h.cancel();
        const Result r = h.wait();
        if (r.completions[0].reason == FinishReason::kCancelled) ++cancelled;
        else same += r.completions[0].tokens == ref[k].completions[0].tokens;
      }
    });
  for (auto& t : clients) t.join();
  EXPECT_EQ(same.load() + cancelled.load(), 24);
  ASSERT_TRUE(e.wait_idle(std::chrono::seconds(60)));
  const EngineStats s = e.stats();
  EXPECT_GT(s.disk.written, 0u);
  EXPECT_EQ(s.kv.used, 0);
  EXPECT_EQ(s.disk.bad_files, 0u);
}

TEST(EngineDisk, NeedsPrefixCaching) {
  EngineOptions o = test::engine_options(AttnMode::kNone, 4, 2);
  o.kv_disk = "/tmp/unused";
  try {
    Engine e(tiny(), o);
    ADD_FAILURE() << "accepted";
  } catch (const Error& err) {
    EXPECT_STREQ(err.what(), "--kv-disk needs prefix caching (retained prefixes, a mode other than none)");
  }
}

}  // namespace
}  // namespace cs
