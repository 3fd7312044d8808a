#include "engine/schema_dir.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "pml/store.h"

namespace cs {

namespace fs = std::filesystem;

void remove_saved_schema(const std::string& dir, const std::string& name) {
  std::error_code ec;
  fs::remove_all(pml::saved_schema_path(dir, name), ec);
  if (ec) throw Error(pml::saved_schema_path(dir, name) + ": cannot delete (" + ec.message() + ")");
}

namespace {

// The PML a saved schema was made from ("" when unreadable).
std::string saved_pml(const std::string& path) {
  std::ifstream f(fs::path(path) / "manifest.json");
  if (!f) return "";
  try {
    return nlohmann::json::parse(f).at("pml").get<std::string>();
  } catch (const nlohmann::json::exception&) {
    return "";
  }
}

SchemaInfo encode_and_save(Engine& engine, pml::Schema schema, const std::string& dir,
                           const std::function<void(int, int)>& progress) {
  const std::string name = schema.name;
  const SchemaInfo info = engine.register_schema(std::move(schema), progress);
  try {
    engine.save_schema(name, dir);
  } catch (...) {
    engine.unregister_schema(name);  // registered and saved go together
    throw;
  }
  return info;
}

}  // namespace

std::vector<SchemaDirEntry> restore_schema_dir(
    Engine& engine, const std::string& dir,
    const std::function<void(const std::string&, int, int)>& progress) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error(dir + ": cannot create the schema directory (" + ec.message() + ")");
  std::vector<std::string> paths;
  for (const fs::directory_entry& d : fs::directory_iterator(dir, ec))
    if (d.is_directory() && d.path().filename().string()[0] != '.') paths.push_back(d.path().string());
  if (ec) throw Error(dir + ": cannot list (" + ec.message() + ")");
  std::sort(paths.begin(), paths.end());
  std::vector<SchemaDirEntry> out;
  for (const std::string& p : pml::remove_stale_saves(dir)) {
    SchemaDirEntry e;
    e.path = p;
    e.what = SchemaDirEntry::What::kRemovedTemporary;
    e.message = "an interrupted save's temporary directory, removed";
    out.push_back(std::move(e));
  }
  for (const std::string& p : paths) {
    SchemaDirEntry e;
    e.path = p;
    try {
      e.info = engine.load_schema(p);
      e.name = e.info.name;
      e.what = SchemaDirEntry::What::kLoaded;
    } catch (const pml::StaleSchema& s) {
      e.name = s.name();
      e.message = s.what();
      try {
        const auto named = [&](int done, int total) {
          if (progress) progress(s.name(), done, total);
        };
        e.info = encode_and_save(engine, pml::parse_schema(s.pml(), p + "/manifest.json (pml)"), dir, named);
        e.what = SchemaDirEntry::What::kEncoded;
      } catch (const Error& x) {
        e.what = SchemaDirEntry::What::kSkipped;
        e.message = x.what();
      }
    } catch (const Error& x) {
      e.message = x.what();
    }
    out.push_back(std::move(e));
  }
  return out;
}

SchemaInfo register_saved_schema(Engine& engine, pml::Schema schema, const std::string& dir,
                                 const std::function<void(int, int)>& progress) {
  const std::string path = pml::saved_schema_path(dir, schema.name);
  if (saved_pml(path) == pml::to_pml(schema)) {
    try {
      return engine.load_schema(path);
    } catch (const Error&) {
      // stale (another model or layout) or damaged: encode it again below
    }
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  return encode_and_save(engine, std::move(schema), dir, progress);
}

}  // namespace cs
