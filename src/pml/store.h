// Saved schemas (Prompt Cache): a registered schema's pinned chunks written to
// disk beside a manifest, and read back at start-up without running the model.
//
//   DIR/NAME/manifest.json  what the bytes are: the schema as self-contained
//                           PML, the model file (name, size, SHA-256), the KV
//                           layout, the placeholder token, each stored
//                           segment's tokens, and the SHA-256 of chunks.bin
//   DIR/NAME/chunks.bin     the chunks' bytes, segment after segment
//
// A save replaces DIR/NAME whole (written beside it, then renamed). Reading
// checks everything before a chunk is pinned: a manifest for another model,
// KV layout or encoder is stale (StaleSchema: its PML is still good to
// encode again); damaged files are an Error naming the file and the problem.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "base/mapped_file.h"
#include "model/llama.h"
#include "pml/encode.h"

namespace cs::pml {

// What the saved bytes were computed by.
struct ModelIdentity {
  std::string file;  // the model file's name (not its directory)
  uint64_t size = 0;
  std::string sha256;
  // "long factors" where a LongRoPE file turns with its long ones (the
  // context decides: LlamaModel::set_context), else "": the same file's KV
  // differs between the two.
  std::string rope;
};
// Hashes the model's file (once per call: keep the result).
ModelIdentity identify(const LlamaModel& model);

// Saved for another model, KV layout or encoder: the schema is fine, its
// bytes are not. pml() is the schema to encode again.
class StaleSchema : public Error {
 public:
  StaleSchema(const std::string& what, std::string name, std::string pml)
      : Error(what), name_(std::move(name)), pml_(std::move(pml)) {}
  const std::string& name() const { return name_; }
  const std::string& pml() const { return pml_; }

 private:
  std::string name_, pml_;
};

// dir/<name>; throws Error when the name cannot be a directory name.
std::string saved_schema_path(const std::string& dir, const std::string& name);

// Writes `e` (its chunks read from `memory`) to dir/<name>/ through a
// temporary dir/.<name>.saving-<pid>/ renamed into place; files are 0600.
// Throws Error naming the path when it cannot.
void save_schema(const EncodedSchema& e, const KvMemory& memory, const ModelIdentity& model, int32_t pad,
                 const std::string& dir);

// Removes the temporary directories of saves whose process is gone (a kill
// during a save leaves one); returns their paths.
std::vector<std::string> remove_stale_saves(const std::string& dir);

// A saved schema read and checked, its chunk bytes mapped.
struct SavedSchema {
  std::string path;  // dir/<name>
  Schema schema;
  std::vector<std::pair<int, std::vector<int32_t>>> segments;  // (layout segment, its tokens)
  std::optional<MappedFile> bytes;
  int scaffolds = 0;
  double encode_s = 0;  // when it was encoded
};
// Reads dir/<name> (`path`) for this model and KV layout. Throws StaleSchema
// or Error (see above).
SavedSchema read_saved_schema(const std::string& path, const ModelIdentity& model, const KvLayout& layout,
                              int32_t pad);

// Pins the saved chunks into `kv` (engine thread). Throws StaleSchema when
// the schema's layout under this tokenizer is not the one saved, Error when
// the pool has no room (nothing stays pinned).
std::unique_ptr<EncodedSchema> restore_schema(SavedSchema saved, PrefixKv& kv, const TextModel& tm);

}  // namespace cs::pml
