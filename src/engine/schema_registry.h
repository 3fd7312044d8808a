// The Prompt Cache schemas an engine holds, by name (Prompt Cache §3.3): each
// one's modules pinned in the engine's KV pool. A name is reserved while its
// schema is encoded or restored, then published; a published schema is
// immutable and shared (requests built for it hold a reference, so it cannot
// be removed under them).
//
// Thread-safe: every call takes the registry's mutex. It never touches the
// tree: pinning and unpinning belong to the engine thread, which calls
// pml::release_schema on what remove() hands back.
//
// Errors are cs::Error with a kind: kExists, kNotFound, kInUse.
#pragma once
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "pml/encode.h"

namespace cs {

// What the engine reports of a schema.
struct SchemaInfo {
  std::string name;
  int positions = 0;     // the layout's length
  int tokens = 0;        // tokens stored
  int modules = 0;       // modules, the schema itself included
  int scaffolds = 0;     // forward passes its encoding took
  size_t bytes = 0;      // KV bytes pinned
  double encode_s = 0;   // encoding (restored: reading and pinning) time
  bool restored = false; // read from a saved schema, not encoded
};
SchemaInfo info_of(const pml::EncodedSchema& e);

class SchemaRegistry {
 public:
  // Takes `name` for a schema about to be encoded or restored: kExists when
  // one of that name is registered or reserved.
  void reserve(const std::string& name);
  // Gives a reserved name back (its encoding or restoring failed).
  void unreserve(const std::string& name);
  // Publishes the schema of a reserved name.
  SchemaInfo publish(std::shared_ptr<pml::EncodedSchema> e);
  // Takes a schema out: kNotFound, or kInUse while a request holds it. The
  // caller releases its chunks.
  std::shared_ptr<pml::EncodedSchema> remove(const std::string& name);
  // The schema named `name`, or null.
  std::shared_ptr<pml::EncodedSchema> find(const std::string& name) const;
  // kNotFound when there is none.
  std::shared_ptr<pml::EncodedSchema> get(const std::string& name) const;
  std::vector<SchemaInfo> list() const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<pml::EncodedSchema>> schemas_;
  std::set<std::string> reserved_;
};

}  // namespace cs
