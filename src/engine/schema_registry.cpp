#include "engine/schema_registry.h"

namespace cs {

SchemaInfo info_of(const pml::EncodedSchema& e) {
  return {e.layout.schema, e.layout.length, e.tokens, int(e.layout.modules.size()),
          e.scaffolds,       e.bytes,         e.seconds, e.restored};
}

void SchemaRegistry::reserve(const std::string& name) {
  std::lock_guard lock(mu_);
  if (schemas_.count(name) || reserved_.count(name))
    throw Error("a schema named '" + name + "' is already registered", ErrorKind::kExists);
  reserved_.insert(name);
}

void SchemaRegistry::unreserve(const std::string& name) {
  std::lock_guard lock(mu_);
  reserved_.erase(name);
}

SchemaInfo SchemaRegistry::publish(std::shared_ptr<pml::EncodedSchema> e) {
  const SchemaInfo info = info_of(*e);
  std::lock_guard lock(mu_);
  reserved_.erase(info.name);
  schemas_[info.name] = std::move(e);
  return info;
}

std::shared_ptr<pml::EncodedSchema> SchemaRegistry::remove(const std::string& name) {
  std::lock_guard lock(mu_);
  auto it = schemas_.find(name);
  if (it == schemas_.end()) throw Error("no schema named '" + name + "' is registered", ErrorKind::kNotFound);
  // Requests built for it hold a reference until they end.
  if (it->second.use_count() > 1) throw Error("schema '" + name + "' is in use by a request", ErrorKind::kInUse);
  auto e = std::move(it->second);
  schemas_.erase(it);
  return e;
}

std::shared_ptr<pml::EncodedSchema> SchemaRegistry::find(const std::string& name) const {
  std::lock_guard lock(mu_);
  auto it = schemas_.find(name);
  return it == schemas_.end() ? nullptr : it->second;
}

std::shared_ptr<pml::EncodedSchema> SchemaRegistry::get(const std::string& name) const {
  auto e = find(name);
  if (!e) throw Error("no schema named '" + name + "' is registered", ErrorKind::kNotFound);
  return e;
}

std::vector<SchemaInfo> SchemaRegistry::list() const {
  std::lock_guard lock(mu_);
  std::vector<SchemaInfo> out;
  for (const auto& [name, e] : schemas_) out.push_back(info_of(*e));
  return out;
}

}  // namespace cs
