// A directory of saved Prompt Cache schemas kept in step with an engine
// (`serve --schema-dir`, `generate --schema-dir`): what is registered is
// saved, what is saved is registered at start-up without running the model.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace cs {

struct SchemaDirEntry {
  enum class What { kLoaded, kEncoded, kSkipped, kRemovedTemporary };
  std::string path;     // dir/<name>
  std::string name;     // empty when the manifest could not be read
  What what = What::kSkipped;
  std::string message;  // kEncoded: why the saved bytes were stale; kSkipped: the error
  SchemaInfo info;
};

// Registers every schema saved under `dir`: as saved, or (saved for another
// model, KV layout or encoder) encoded again from its PML and saved over.
// Damaged ones are skipped and left on disk. A missing dir is created. The
// temporary directory of a save that a kill interrupted is removed (an entry
// kRemovedTemporary each).
// progress(name, done, total) follows the encoding of stale ones.
std::vector<SchemaDirEntry> restore_schema_dir(
    Engine& engine, const std::string& dir,
    const std::function<void(const std::string&, int, int)>& progress = {});

// Registers `schema` and saves it under `dir`; when dir already holds this
// very schema (the same PML) for this model, its saved chunks are loaded
// instead of encoding.
SchemaInfo register_saved_schema(Engine& engine, pml::Schema schema, const std::string& dir,
                                 const std::function<void(int, int)>& progress = {});

// Deletes dir/<name> (no error when it is not there).
void remove_saved_schema(const std::string& dir, const std::string& name);

}  // namespace cs
