// KV events for prefix-aware routers, in vLLM's format as vllm-router
// decodes it: each batch is the msgpack array [ts, events,
// data_parallel_rank] (an array-like msgspec struct); each event a map tagged
// by "type": BlockStored {block_hashes, parent_block_hash, token_ids,
// block_size, lora_id, medium, lora_name}, BlockRemoved {block_hashes,
// medium} or AllBlocksCleared {}.
// Consecutive blocks of one chain are one BlockStored (its token_ids are all
// of theirs), as vLLM sends them. Hashes are unsigned 63-bit integers;
// medium, lora_id and lora_name are nil.
//
// The publisher sends each batch as the multipart message [topic, sequence
// number (8 bytes, big-endian), payload] on a ZMQ PUB socket, keeps the last
// `buffer` batches, and answers replay requests on a ROUTER socket: a client
// sends [start sequence (8 bytes)], and gets [seq, payload] for each kept
// batch from there, then [-1 (8 bytes), empty]. A subscriber that missed
// messages (it connected late, or was restarted) catches up from there.
//
// Threading: publish() from any thread (the engine's); one thread of its own
// owns the sockets.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "kv/block_ledger.h"

namespace cs {

// One batch's msgpack bytes. `cleared` puts AllBlocksCleared first.
std::string encode_kv_event_batch(double ts, std::span<const BlockEvent> events, int block_size, bool cleared = false);

struct KvEventOptions {
  std::string endpoint;         // PUB socket, bound (tcp://127.0.0.1:5557)
  std::string replay_endpoint;  // ROUTER socket for replays, bound; empty: none
  std::string topic;            // first frame of each message
  int block_size = 16;
  size_t buffer = 10000;        // batches kept for replay
};

class KvEventPublisher {
 public:
  // Binds the sockets (throws cs::Error naming the endpoint that failed) and
  // announces AllBlocksCleared: a replica that (re)starts holds nothing.
  explicit KvEventPublisher(KvEventOptions opt);
  ~KvEventPublisher();  // sends what is queued, then closes
  KvEventPublisher(const KvEventPublisher&) = delete;
  KvEventPublisher& operator=(const KvEventPublisher&) = delete;

  void publish(std::vector<BlockEvent> events);

 private:
  void run();
  struct Sockets;
  KvEventOptions opt_;
  std::unique_ptr<Sockets> sockets_;
  std::mutex mu_;
  std::condition_variable cv_;
  struct Pending {
    double ts;
    std::vector<BlockEvent> events;
    bool cleared;
  };
  std::deque<Pending> queue_;  // batches waiting to be encoded and sent
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace cs
