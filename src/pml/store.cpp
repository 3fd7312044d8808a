#include "pml/store.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/fd.h"
#include "base/parse_int.h"
#include "base/sha256.h"

namespace cs::pml {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Bumped whenever encoding would store other bytes for the same schema and
// model (scaffold rules, placeholder policy, chunk layout).
constexpr int kFormat = 1;
constexpr const char* kSavingSuffix = ".saving-";

json layout_json(const KvLayout& L) {
  return {{"type", kv_type_name(L.type)}, {"chunk_size", L.chunk_size}, {"n_layers", L.n_layers},
          {"n_kv_heads", L.n_kv_heads}, {"head_dim", L.head_dim}};
}

json model_json(const ModelIdentity& m) {
  json j = {{"file", m.file}, {"size", m.size}, {"sha256", m.sha256}};
  if (!m.rope.empty()) j["rope"] = m.rope;
  return j;
}

std::string read_text(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) throw Error(p.string() + ": cannot read");
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// Owner-only (0600): a saved schema holds prompt text and its K/V.
void write_file(const fs::path& p, const void* data, size_t n) {
  Fd fd(::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  const auto fail = [&] { return Error(p.string() + ": cannot write (" + std::strerror(errno) + ")"); };
  if (fd.get() < 0) throw fail();
  const char* at = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd.get(), at, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) throw fail();
    at += w, n -= size_t(w);
  }
  if (!fd.close()) throw fail();
}

}  // namespace

std::string saved_schema_path(const std::string& dir, const std::string& name) {
  const bool ok = !name.empty() && name[0] != '.' && name.size() <= 200 &&
                  std::none_of(name.begin(), name.end(), [](char c) { return c == '/' || c == '\\' || c == '\0'; });
  if (!ok) throw Error("the schema name '" + name + "' cannot be saved as a directory name");
  return (fs::path(dir) / name).string();
}

ModelIdentity identify(const LlamaModel& model) {
  const MappedFile& f = model.file().mapped();
  return {fs::path(f.path()).filename().string(), f.size(), sha256_hex({f.data(), f.size()}),
          model.config().uses_long_factors() ? "long factors" : ""};
}

std::vector<std::string> remove_stale_saves(const std::string& dir) {
  std::vector<std::string> removed;
  std::error_code ec;
  for (const fs::directory_entry& d : fs::directory_iterator(dir, ec)) {
    const std::string name = d.path().filename().string();
    const size_t at = name.rfind(kSavingSuffix);
    if (name[0] != '.' || at == std::string::npos) continue;
    const std::optional<long> pid = parse_long(name.substr(at + std::strlen(kSavingSuffix)));
    // A live process (this one, or another server on the same directory) may be saving.
    if (!pid || *pid <= 0 || ::kill(pid_t(*pid), 0) == 0 || errno != ESRCH) continue;
    std::error_code rm;
    fs::remove_all(d.path(), rm);
    if (!rm) removed.push_back(d.path().string());
  }
  std::sort(removed.begin(), removed.end());
  return removed;
}

void save_schema(const EncodedSchema& e, const KvMemory& memory, const ModelIdentity& model, int32_t pad,
                 const std::string& dir) {
  const KvLayout& L = memory.layout();
  std::vector<uint8_t> bytes;
  json segments = json::array();
  for (size_t g = 0; g < e.chunks.size(); ++g) {
    if (e.chunks[g].empty()) continue;
    segments.push_back({{"segment", g}, {"tokens", e.layout.segments[g].tokens}});
    for (ChunkId c : e.chunks[g]) {
      bytes.resize(bytes.size() + L.chunk_bytes());
      memory.read_chunk(c, bytes.data() + bytes.size() - L.chunk_bytes());
    }
  }
  const json manifest = {{"format", kFormat},
                         {"name", e.schema.name},
                         {"pml", to_pml(e.schema)},
                         {"model", model_json(model)},
                         {"kv", layout_json(L)},
                         {"pad", pad},
                         {"segments", segments},
                         {"tokens", e.tokens},
                         {"bytes", bytes.size()},
                         {"scaffolds", e.scaffolds},
                         {"encode_s", e.seconds},
                         {"chunks_sha256", sha256_hex(bytes)}};
  const fs::path final_dir = saved_schema_path(dir, e.schema.name);
  const fs::path tmp = fs::path(dir) / ("." + e.schema.name + kSavingSuffix + std::to_string(getpid()));
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!ec) fs::remove_all(tmp, ec);
  if (!ec && ::mkdir(tmp.c_str(), 0700) != 0) ec = std::error_code(errno, std::generic_category());
  if (ec) throw Error(tmp.string() + ": cannot create (" + ec.message() + ")");
  try {
    write_file(tmp / "chunks.bin", bytes.data(), bytes.size());
    const std::string m = manifest.dump(1);
    write_file(tmp / "manifest.json", m.data(), m.size());
    fs::remove_all(final_dir);
    fs::rename(tmp, final_dir);
  } catch (const fs::filesystem_error& x) {
    fs::remove_all(tmp, ec);
    throw Error(final_dir.string() + ": cannot save (" + x.code().message() + ")");
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
}

SavedSchema read_saved_schema(const std::string& path, const ModelIdentity& model, const KvLayout& layout,
                              int32_t pad) {
  const fs::path mpath = fs::path(path) / "manifest.json";
  json m;
  try {
    m = json::parse(read_text(mpath));
  } catch (const json::exception& x) {
    throw Error(mpath.string() + ": not a manifest (" + x.what() + ")");
  }
  SavedSchema s;
  s.path = path;
  try {
    const std::string name = m.at("name").get<std::string>(), pml = m.at("pml").get<std::string>();
    const auto stale = [&](const std::string& why) { return StaleSchema(mpath.string() + ": " + why, name, pml); };
    if (m.at("format").get<int>() != kFormat)
      throw stale("saved by another encoder (format " + std::to_string(m.at("format").get<int>()) + ", this is " +
                  std::to_string(kFormat) + ")");
    // The same bytes under another name or path are the same model.
    if (m.at("model").at("sha256") != model.sha256 || m.at("model").at("size") != model.size)
      throw stale("saved for the model " + m.at("model").at("file").get<std::string>() + " (sha256 " +
                  m.at("model").at("sha256").get<std::string>().substr(0, 12) + "...), not " + model.file +
                  " (sha256 " + model.sha256.substr(0, 12) + "...)");
    if (m.at("model").value("rope", std::string()) != model.rope)
      throw stale("saved with the model's " + std::string(model.rope.empty() ? "long" : "short") +
                  " RoPE factors (another context), not its " + (model.rope.empty() ? "short" : "long") + " ones");
    if (m.at("kv") != layout_json(layout))
      throw stale("saved for the KV layout " + m.at("kv").dump() + ", not " + layout_json(layout).dump());
    if (m.at("pad").get<int32_t>() != pad) throw stale("saved with another placeholder token");
    s.schema = parse_schema(pml, mpath.string() + " (pml)");
    if (s.schema.name != name) throw Error(mpath.string() + ": the PML names the schema '" + s.schema.name + "'");
    for (const json& seg : m.at("segments"))
      s.segments.emplace_back(seg.at("segment").get<int>(), seg.at("tokens").get<std::vector<int32_t>>());
    s.scaffolds = m.at("scaffolds").get<int>();
    s.encode_s = m.at("encode_s").get<double>();
    const fs::path bpath = fs::path(path) / "chunks.bin";
    s.bytes.emplace(bpath.string());
    size_t chunks = 0;
    for (const auto& [g, toks] : s.segments) chunks += (toks.size() + size_t(layout.chunk_size) - 1) / size_t(layout.chunk_size);
    if (s.bytes->size() != chunks * layout.chunk_bytes())
      throw Error(bpath.string() + ": " + std::to_string(s.bytes->size()) + " bytes, the manifest's segments need " +
                  std::to_string(chunks * layout.chunk_bytes()));
    if (sha256_hex({s.bytes->data(), s.bytes->size()}) != m.at("chunks_sha256").get<std::string>())
      throw Error(bpath.string() + ": damaged (its SHA-256 is not the manifest's)");
  } catch (const json::exception& x) {
    throw Error(mpath.string() + ": malformed manifest (" + x.what() + ")");
  }
  return s;
}

std::unique_ptr<EncodedSchema> restore_schema(SavedSchema saved, PrefixKv& kv, const TextModel& tm) {
  const auto t0 = std::chrono::steady_clock::now();
  auto e = std::make_unique<EncodedSchema>();
  e->schema = std::move(saved.schema);
  e->layout = lay_out(e->schema, tm.encode, tm.roles, tm.bos);
  e->chunks.resize(e->layout.segments.size());
  e->scaffolds = saved.scaffolds;
  e->restored = true;
  const std::string manifest = saved.path + "/manifest.json";
  const auto stale = [&](const std::string& why) { return StaleSchema(manifest + ": " + why, e->schema.name, to_pml(e->schema)); };
  // The segments encoding would store, and their tokens, must be the saved ones.
  std::vector<int> expected;
  for (size_t g = 0; g < e->layout.segments.size(); ++g) {
    const Segment& seg = e->layout.segments[g];
    if (seg.kind == Segment::Kind::kText && e->layout.modules[size_t(seg.module)].cache && !seg.tokens.empty())
      expected.push_back(int(g));
  }
  if (expected.size() != saved.segments.size()) throw stale("the schema's layout has other cached segments than saved");
  for (size_t i = 0; i < expected.size(); ++i)
    if (saved.segments[i].first != expected[i] || saved.segments[i].second != e->layout.segments[size_t(expected[i])].tokens)
      throw stale("segment " + std::to_string(expected[i]) + " tokenizes differently than saved");
  const KvLayout& L = kv.layout();
  const int cs = L.chunk_size;
  size_t offset = 0;
  try {
    for (const auto& [g, toks] : saved.segments) {
      const uint64_t group = new_pin_group();
      for (size_t off = 0; off < toks.size(); off += size_t(cs)) {
        const size_t n = std::min(toks.size() - off, size_t(cs));
        const ChunkId c = kv.pin(std::span(toks).subspan(off, n), group);
        if (c < 0)
          throw Error("the KV pool has no room for schema '" + e->schema.name + "' (" + std::to_string(e->tokens) +
                          " of its tokens pinned; --kv-memory)",
                      ErrorKind::kNoRoom);
        e->chunks[size_t(g)].push_back(c);
        kv.memory().write_chunk(c, saved.bytes->data() + offset);
        offset += L.chunk_bytes();
        e->tokens += int(n);
        e->bytes += L.chunk_bytes();
      }
    }
  } catch (...) {
    release_schema(kv, *e);
    throw;
  }
  e->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return e;
}

}  // namespace cs::pml
