// The Responses API's stored responses (POST /v1/responses with "store",
// GET and DELETE /v1/responses/{id}, previous_response_id): each response's
// object and the conversation it ended (its input items after the earlier
// ones, then its output items), kept in memory under a count and a byte
// bound, least recently used first out. Thread-safe.
#pragma once
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include <nlohmann/json.hpp>

namespace cs {

struct StoredResponse {
  std::string object;                   // the response object, as GET answers it
  nlohmann::ordered_json conversation;  // items, earlier responses' first, this one's output last
  size_t bytes() const;                 // what it holds (its JSON as text)
};

struct ResponseStoreStats {
  size_t count = 0, bytes = 0;
  uint64_t evicted = 0;
};

class ResponseStore {
 public:
  ResponseStore(size_t max_count, size_t max_bytes) : max_count_(max_count), max_bytes_(max_bytes) {}

  // Keeps `r` (a response larger than the byte bound is not kept: false);
  // older ones go while the bounds are exceeded.
  bool put(const std::string& id, std::shared_ptr<const StoredResponse> r);
  // Null when not (or no longer) stored; a hit counts as a use.
  std::shared_ptr<const StoredResponse> get(const std::string& id);
  bool remove(const std::string& id);
  ResponseStoreStats stats() const;

 private:
  struct Entry {
    std::string id;
    std::shared_ptr<const StoredResponse> r;
    size_t bytes;
  };
  using Lru = std::list<Entry>;
  const size_t max_count_, max_bytes_;
  mutable std::mutex mu_;
  Lru lru_;  // most recent first
  std::unordered_map<std::string, Lru::iterator> index_;
  size_t bytes_ = 0;
  uint64_t evicted_ = 0;
};

}  // namespace cs
