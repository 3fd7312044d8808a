// Stored responses (server/response_store.h).
#include "server/response_store.h"

namespace cs {

// A reply cut inside a UTF-8 character holds bytes JSON text cannot: they
// count as the replacement character they are dumped as.
size_t StoredResponse::bytes() const {
  return object.size() + conversation.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace).size();
}

bool ResponseStore::put(const std::string& id, std::shared_ptr<const StoredResponse> r) {
  const size_t size = r->bytes();
  std::lock_guard lock(mu_);
  if (auto it = index_.find(id); it != index_.end()) {
    bytes_ -= it->second->bytes;
    lru_.erase(it->second);
    index_.erase(it);
  }
  if (size > max_bytes_ || max_count_ == 0) return false;
  lru_.push_front({id, std::move(r), size});
  index_[id] = lru_.begin();
  bytes_ += size;
  while (lru_.size() > max_count_ || bytes_ > max_bytes_) {
    bytes_ -= lru_.back().bytes;
    index_.erase(lru_.back().id);
    lru_.pop_back();
    ++evicted_;
  }
  return true;
}

std::shared_ptr<const StoredResponse> ResponseStore::get(const std::string& id) {
  std::lock_guard lock(mu_);
  const auto it = index_.find(id);
  if (it == index_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->r;
}

bool ResponseStore::remove(const std::string& id) {
  std::lock_guard lock(mu_);
  const auto it = index_.find(id);
  if (it == index_.end()) return false;
  bytes_ -= it->second->bytes;
  lru_.erase(it->second);
  index_.erase(it);
  return true;
}

ResponseStoreStats ResponseStore::stats() const {
  std::lock_guard lock(mu_);
  return {lru_.size(), bytes_, evicted_};
}

}  // namespace cs
