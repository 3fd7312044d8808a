// The disk tier under the prefix tree: full chunks the pool lets go of are
// kept as files (kv/kv_file.h) in DIR/<root>/, one per chunk, named by the
// chunk's key (kv/chunk_key.h: its whole token prefix, the model and the KV
// layout), and read back into the pool bit for bit when a prompt's match in
// the tree ends where the tier goes on. The directory has its own LRU under
// a byte budget.
//
// Threading: every call is thread-safe and quick; the files are written,
// read and removed by the tier's own I/O thread, never by the caller (the
// engine thread keeps stepping). store() copies the chunk's bytes into a
// bounded queue (dropping, counted, beyond it); load() queues a read and
// returns at once; the reads come back through take_loaded() and the
// on_loaded callback wakes whoever waits for them. Reads go before writes.
//
// Faults: a file is written under a temporary name and renamed, so a kill
// leaves either the whole file or a temporary one, which start-up removes.
// Start-up rebuilds the index from the files' headers; a read checks the
// whole file (checksum, header, tokens) before anything is served, and a bad
// file is counted and removed. A directory that cannot be made, or a write
// that fails (disk full, read-only), logs one line and turns writing off;
// serving goes on.
//
// Ownership: DIR/<root> is opened without following links (a link in its
// place turns the tier off) and every file in it is named relative to that
// handle; the tier removes only files named as its own whose headers it wrote
// (scan()), and leaves the rest alone. One server writes a directory (a lock
// on it); a second one on the same directory only reads what the first keeps.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "kv/chunk_key.h"

namespace cs {

struct DiskTierOptions {
  std::string dir;                    // DIR; the files go in DIR/<root hex>/
  uint64_t capacity_bytes = 8ull << 30;
  ChunkKey root;                      // chunk_key_root(model, layout)
  int chunk_tokens = 64;
  size_t chunk_bytes = 0;             // the pool's bytes per chunk
  size_t max_queued_bytes = 256u << 20;  // writes waiting for the I/O thread
  std::function<void()> on_loaded;    // called on the I/O thread after each load
  std::function<void()> before_read;  // called on the I/O thread before each load (tests hold it there)
};

struct DiskTierStats {
  bool writable = false;
  uint64_t files = 0, bytes = 0, capacity_bytes = 0;
  uint64_t written = 0, bytes_written = 0;  // files committed
  uint64_t loaded = 0, bytes_read = 0;      // chunks read back and checked
  uint64_t evicted = 0;                     // removed by the directory's LRU
  uint64_t dropped = 0;                     // writes dropped: queue full or writing off
  uint64_t write_errors = 0;
  uint64_t bad_files = 0;                   // torn, truncated or corrupted: removed, never served
  uint64_t missing = 0;                     // indexed but gone when read
  uint64_t foreign_files = 0;               // found at start-up, not the tier's: left alone
  uint64_t loads = 0;                       // load() calls answered
  double load_seconds = 0;                  // their total time, queue to answer
};

// A chunk the caller wants back: its key, its parent's and its tokens (the
// file must hold exactly these).
struct DiskWant {
  ChunkKey key, parent;
  std::vector<int32_t> tokens;
};

// What a load() brought back: the leading wanted chunks that were read and
// checked, in order (a missing or bad one ends the run).
struct DiskLoad {
  uint64_t ticket = 0;
  std::vector<DiskWant> chunks;
  std::vector<std::vector<uint8_t>> data;  // per chunk: chunk_bytes of K/V
  double seconds = 0;
};

class DiskTier {
 public:
  // Makes DIR/<root hex>/, removes temporary files left by a kill and bad
  // files, and indexes the rest (oldest first by modification time). Never
  // throws for the directory: a failure logs one line and leaves the tier
  // empty with writing off.
  explicit DiskTier(DiskTierOptions opt);
  ~DiskTier();  // finishes the queued writes, then stops
  DiskTier(const DiskTier&) = delete;
  DiskTier& operator=(const DiskTier&) = delete;

  // Whether a committed file holds this key.
  bool has(const ChunkKey& key) const;
  // Queues the chunk's file (copying `data`, chunk_bytes); nothing when the
  // key is already kept (it becomes the most recently used) or writing is
  // off; dropped (counted) when the queue is full unless `wait` (shutdown).
  void store(const DiskWant& chunk, std::span<const uint8_t> data, bool wait = false);
  // The same with the bytes written by `fill` (size of them) straight into
  // the queue's buffer (a KvMemory's read_chunk: one copy, not two).
  void store(const DiskWant& chunk, size_t size, const std::function<void(uint8_t*)>& fill, bool wait = false);
  // Queues a read of the chunks, in order; the answer carries `ticket`.
  void load(uint64_t ticket, std::vector<DiskWant> chunks);
  // The loads answered since the last call.
  std::vector<DiskLoad> take_loaded();
  // Waits until every queued write and read is done.
  void drain();
  // Gives back a DiskLoad's data buffer for later reads (saves the page
  // faults of a fresh buffer per chunk); at most 64 MiB of them are kept.
  void recycle(std::vector<uint8_t> buffer);

  DiskTierStats stats() const;
  const std::string& path() const { return path_; }
  const ChunkKey& root() const { return opt_.root; }

 private:
  struct Entry {
    uint64_t bytes = 0;
    uint64_t tick = 0;
    bool committed = false;  // false: its write is queued
  };
  struct Write {
    DiskWant chunk;
    std::vector<uint8_t> data;
  };
  struct Read {
    uint64_t ticket;
    std::vector<DiskWant> chunks;
    std::chrono::steady_clock::time_point queued;
  };
  void scan();
  void run();
  void write_file(Write& w);
  void read_files(Read& r);
  bool read_file(const std::string& name, const DiskWant& want, std::vector<uint8_t>& data, bool* missing);
  void open_dir();
  // Evicts least recently used committed files until `incoming` more bytes fit. Caller holds mu_.
  bool make_room(uint64_t incoming);
  void touch(const ChunkKey& key, Entry& e);  // caller holds mu_ (as for the two below)
  void commit(const ChunkKey& key, Entry& e);
  void forget(const ChunkKey& key);           // out of the index (the file is the caller's)
  void writing_off(const std::string& why);   // caller holds mu_
  static std::string name_of(const ChunkKey& key) { return key.hex() + ".kv"; }

  DiskTierOptions opt_;
  std::string path_;  // DIR/<root>, for messages; files are named relative to dir_
  int dir_ = -1;      // DIR/<root>, opened without following a link, locked unless reader_
  bool reader_ = false;  // another server holds the directory: read, never write or remove
  mutable std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::unordered_map<ChunkKey, Entry, ChunkKeyHash> index_;
  std::set<std::pair<uint64_t, ChunkKey>> lru_;  // committed files by last use
  uint64_t tick_ = 0;
  uint64_t bytes_ = 0;      // committed and queued files' bytes
  uint64_t queued_bytes_ = 0;
  uint64_t committed_bytes_ = 0;
  std::deque<Write> writes_;
  std::deque<Read> reads_;
  std::deque<ChunkKey> removals_;
  std::vector<DiskLoad> loaded_;
  std::vector<std::vector<uint8_t>> spare_;  // recycled read buffers
  int busy_ = 0;  // jobs the I/O thread holds
  bool writable_ = false;
  bool stop_ = false;
  DiskTierStats stats_;
  std::thread thread_;
};

}  // namespace cs
