#include "kv/disk_tier.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <utility>

#include "kv/kv_file.h"

namespace cs {

namespace fs = std::filesystem;

namespace {

// Writes all of `bytes` to fd; false with errno set.
bool write_all(int fd, std::span<const uint8_t> bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += size_t(n);
  }
  return true;
}

// Reads `n` bytes at `offset`; false on an error or a short read.
bool pread_exact(int fd, uint8_t* out, size_t n, uint64_t offset) {
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::pread(fd, out + got, n - got, off_t(offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    got += size_t(r);
  }
  return true;
}

}  // namespace

DiskTier::DiskTier(DiskTierOptions opt) : opt_(std::move(opt)) {
  stats_.capacity_bytes = opt_.capacity_bytes;
  path_ = (fs::path(opt_.dir) / opt_.root.hex()).string();
  std::error_code ec;
  fs::create_directories(path_, ec);
  if (ec || ::access(path_.c_str(), W_OK | X_OK) != 0) {
    writing_off("cannot use " + path_ + ": " + (ec ? ec.message() : std::string(std::strerror(errno))));
    ++stats_.write_errors;
  } else {
    writable_ = true;
    scan();
  }
  thread_ = std::thread([this] { run(); });
}

DiskTier::~DiskTier() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void DiskTier::writing_off(const std::string& why) {
  if (writable_ || stats_.write_errors == 0)
    std::fprintf(stderr, "kv-disk: %s; writing to the disk tier is off, serving goes on\n", why.c_str());
  writable_ = false;
}

// A temporary file of a live process (another server on the same directory)
// is being written: .<key>.<pid>.tmp.
static bool written_by_live_process(const std::string& name) {
  if (name.size() < 6 || name[0] != '.' || !name.ends_with(".tmp")) return false;
  const std::string mid = name.substr(1, name.size() - 5);  // <key>.<pid>
  const size_t dot = mid.rfind('.');
  if (dot == std::string::npos || dot + 1 >= mid.size()) return false;
  const std::string pid = mid.substr(dot + 1);
  if (pid.find_first_not_of("0123456789") != std::string::npos || pid.size() > 9) return false;
  const long p = std::stol(pid);
  return p > 0 && (::kill(pid_t(p), 0) == 0 || errno != ESRCH);
}

// Temporary files are what a kill during a write leaves; a header that does
// not parse or a length that is not the header's is a file cut short.
void DiskTier::scan() {
  struct Found {
    ChunkKey key;
    uint64_t bytes;
    fs::file_time_type mtime;
  };
  std::vector<Found> found;
  std::error_code ec;
  for (const fs::directory_entry& d : fs::directory_iterator(path_, ec)) {
    const std::string name = d.path().filename().string();
    if (written_by_live_process(name)) continue;
    const auto key = name.size() == 35 && name.ends_with(".kv") ? ChunkKey::from_hex(name.substr(0, 32)) : std::nullopt;
    bool good = false;
    KvFileHeader h;
    if (key) {
      const int fd = ::open(d.path().c_str(), O_RDONLY | O_CLOEXEC);
      uint8_t head[kKvFileHeaderBytes];
      struct stat st {};
      if (fd >= 0 && pread_exact(fd, head, sizeof head, 0) && ::fstat(fd, &st) == 0)
        good = parse_kv_header(head, &h) == KvFileError::kNone && h.key == *key && h.root == opt_.root &&
               h.tokens == uint32_t(opt_.chunk_tokens) && h.data_bytes == opt_.chunk_bytes &&
               uint64_t(st.st_size) == h.file_bytes();
      if (fd >= 0) ::close(fd);
    }
    if (good) {
      std::error_code t;
      found.push_back({*key, h.file_bytes(), fs::last_write_time(d.path(), t)});
      continue;
    }
    std::error_code rm;
    fs::remove(d.path(), rm);
    ++stats_.bad_files;
  }
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) { return a.mtime < b.mtime; });
  std::lock_guard lock(mu_);
  for (const Found& f : found) {
    Entry& e = index_[f.key];
    e.bytes = f.bytes;
    e.tick = ++tick_;
    bytes_ += f.bytes;
    commit(f.key, e);
  }
  make_room(0);
}

void DiskTier::touch(const ChunkKey& key, Entry& e) {
  if (e.committed && e.tick) lru_.erase({e.tick, key});
  e.tick = ++tick_;
  if (e.committed) lru_.insert({e.tick, key});
}

void DiskTier::commit(const ChunkKey& key, Entry& e) {
  e.committed = true;
  lru_.insert({e.tick, key});
  committed_bytes_ += e.bytes;
}

void DiskTier::forget(const ChunkKey& key) {
  auto it = index_.find(key);
  if (it == index_.end()) return;
  if (it->second.committed) {
    lru_.erase({it->second.tick, key});
    committed_bytes_ -= it->second.bytes;
  }
  bytes_ -= it->second.bytes;
  index_.erase(it);
}

bool DiskTier::make_room(uint64_t incoming) {
  while (bytes_ + incoming > opt_.capacity_bytes && !lru_.empty()) {
    const ChunkKey victim = lru_.begin()->second;
    forget(victim);
    removals_.push_back(victim);
    ++stats_.evicted;
  }
  if (!removals_.empty()) cv_.notify_all();
  return bytes_ + incoming <= opt_.capacity_bytes;
}

bool DiskTier::has(const ChunkKey& key) const {
  std::lock_guard lock(mu_);
  auto it = index_.find(key);
  return it != index_.end() && it->second.committed;
}

void DiskTier::store(const DiskWant& chunk, std::span<const uint8_t> data, bool wait) {
  const uint64_t file_bytes = kKvFileHeaderBytes + 4ull * chunk.tokens.size() + data.size() + 8;
  std::unique_lock lock(mu_);
  if (auto it = index_.find(chunk.key); it != index_.end()) {
    touch(chunk.key, it->second);
    return;
  }
  if (wait && writable_ && data.size() <= opt_.max_queued_bytes)
    idle_cv_.wait(lock, [&] { return queued_bytes_ + data.size() <= opt_.max_queued_bytes || stop_ || !writable_; });
  if (!writable_ || queued_bytes_ + data.size() > opt_.max_queued_bytes || !make_room(file_bytes)) {
    ++stats_.dropped;
    return;
  }
  Entry& e = index_[chunk.key];
  e.bytes = file_bytes;
  e.tick = ++tick_;
  bytes_ += file_bytes;
  queued_bytes_ += data.size();
  writes_.push_back({chunk, std::vector<uint8_t>(data.begin(), data.end())});
  lock.unlock();
  cv_.notify_all();
}

void DiskTier::load(uint64_t ticket, std::vector<DiskWant> chunks) {
  {
    std::lock_guard lock(mu_);
    reads_.push_back({ticket, std::move(chunks), std::chrono::steady_clock::now()});
  }
  cv_.notify_all();
}

std::vector<DiskLoad> DiskTier::take_loaded() {
  std::lock_guard lock(mu_);
  return std::exchange(loaded_, {});
}

void DiskTier::drain() {
  std::unique_lock lock(mu_);
  idle_cv_.wait(lock, [&] { return (writes_.empty() && reads_.empty() && removals_.empty() && busy_ == 0) || stop_; });
}

DiskTierStats DiskTier::stats() const {
  std::lock_guard lock(mu_);
  DiskTierStats s = stats_;
  s.writable = writable_;
  s.files = lru_.size();
  s.bytes = committed_bytes_;
  return s;
}

// Reads first (a request waits for them), then removals (so that a file
// evicted and stored again is not removed after its new write), then writes.
void DiskTier::run() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !reads_.empty() || !removals_.empty() || !writes_.empty(); });
    if (!reads_.empty()) {
      Read r = std::move(reads_.front());
      reads_.pop_front();
      ++busy_;
      lock.unlock();
      read_files(r);
      lock.lock();
      --busy_;
    } else if (!removals_.empty()) {
      const ChunkKey k = removals_.front();
      removals_.pop_front();
      ++busy_;
      lock.unlock();
      std::error_code ec;
      fs::remove(file_of(k), ec);
      lock.lock();
      --busy_;
    } else if (!writes_.empty()) {
      Write w = std::move(writes_.front());
      writes_.pop_front();
      ++busy_;
      lock.unlock();
      write_file(w);
      lock.lock();
      --busy_;
      queued_bytes_ -= w.data.size();
    } else if (stop_) {
      idle_cv_.notify_all();
      return;
    }
    idle_cv_.notify_all();
  }
}

void DiskTier::write_file(Write& w) {
  {
    // Writing went off after this one was queued: it is dropped too.
    std::lock_guard lock(mu_);
    if (!writable_) {
      ++stats_.dropped;
      forget(w.chunk.key);
      return;
    }
  }
  KvFileHeader h;
  h.root = opt_.root;
  h.key = w.chunk.key;
  h.parent = w.chunk.parent;
  const std::vector<uint8_t> file = encode_kv_file(h, w.chunk.tokens, w.data);
  const std::string final_path = file_of(w.chunk.key);
  const std::string tmp = path_ + "/." + w.chunk.key.hex() + "." + std::to_string(::getpid()) + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  bool ok = fd >= 0 && write_all(fd, file);
  const int err = errno;
  if (fd >= 0) ok = ::close(fd) == 0 && ok;
  ok = ok && ::rename(tmp.c_str(), final_path.c_str()) == 0;
  if (!ok) ::unlink(tmp.c_str());
  std::lock_guard lock(mu_);
  auto it = index_.find(w.chunk.key);
  if (!ok) {
    ++stats_.write_errors;
    writing_off("cannot write " + final_path + ": " + std::strerror(err ? err : errno));
    forget(w.chunk.key);
    return;
  }
  ++stats_.written;
  stats_.bytes_written += file.size();
  if (it != index_.end()) commit(it->first, it->second);
}

// One chunk's file, checked whole, its data read straight into `data`.
bool DiskTier::read_file(const std::string& path, const DiskWant& want, std::vector<uint8_t>& data, bool* missing) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  *missing = fd < 0;
  if (fd < 0) return false;
  struct stat st {};
  std::vector<uint8_t> head(kKvFileHeaderBytes + 4 * want.tokens.size());
  uint8_t sum[8];
  data.resize(opt_.chunk_bytes);
  const uint64_t expect = head.size() + data.size() + 8;
  bool ok = ::fstat(fd, &st) == 0 && uint64_t(st.st_size) == expect && pread_exact(fd, head.data(), head.size(), 0) &&
            pread_exact(fd, data.data(), data.size(), head.size()) &&
            pread_exact(fd, sum, 8, head.size() + data.size());
  ::close(fd);
  KvFileHeader h;
  std::vector<int32_t> tokens;
  return ok && check_kv_parts(head, data, sum, &h, &tokens) == KvFileError::kNone && h.root == opt_.root &&
         h.key == want.key && h.parent == want.parent && tokens == want.tokens;
}

void DiskTier::recycle(std::vector<uint8_t> buffer) {
  std::lock_guard lock(mu_);
  // At most 64 MiB kept (one buffer at least).
  const size_t keep = std::max<size_t>(1, (size_t(64) << 20) / std::max<size_t>(1, opt_.chunk_bytes));
  if (spare_.size() < keep && buffer.capacity() >= opt_.chunk_bytes) spare_.push_back(std::move(buffer));
}

void DiskTier::read_files(Read& r) {
  if (opt_.before_read) opt_.before_read();
  DiskLoad out;
  out.ticket = r.ticket;
  // A missing or bad chunk ends the run; the ones after it will be computed
  // again, so they leave the index (unread) and their fresh copies replace them.
  const auto drop_rest = [&](size_t from) {
    std::lock_guard lock(mu_);
    for (size_t k = from; k < r.chunks.size(); ++k)
      if (auto it = index_.find(r.chunks[k].key); it != index_.end() && it->second.committed) forget(r.chunks[k].key);
  };
  for (size_t at = 0; at < r.chunks.size(); ++at) {
    DiskWant& want = r.chunks[at];
    const std::string p = file_of(want.key);
    std::vector<uint8_t> data;
    {
      std::lock_guard lock(mu_);
      if (!spare_.empty()) data = std::move(spare_.back()), spare_.pop_back();
    }
    bool missing = false;
    const bool good = read_file(p, want, data, &missing);
    if (!good) {
      {
        std::lock_guard lock(mu_);
        if (missing) {
          ++stats_.missing;
        } else {
          ++stats_.bad_files;
          std::fprintf(stderr, "kv-disk: %s is damaged; removed, its chunk is computed again\n", p.c_str());
        }
        forget(want.key);
      }
      std::error_code ec;
      if (!missing) fs::remove(p, ec);
      drop_rest(at + 1);
      break;
    }
    std::lock_guard lock(mu_);
    if (auto it = index_.find(want.key); it != index_.end()) touch(want.key, it->second);
    ++stats_.loaded;
    stats_.bytes_read += kKvFileHeaderBytes + 4 * want.tokens.size() + data.size() + 8;
    out.data.push_back(std::move(data));
    out.chunks.push_back(std::move(want));
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - r.queued).count();
  {
    std::lock_guard lock(mu_);
    ++stats_.loads;
    stats_.load_seconds += out.seconds;
    loaded_.push_back(std::move(out));
  }
  if (opt_.on_loaded) opt_.on_loaded();
}

}  // namespace cs
