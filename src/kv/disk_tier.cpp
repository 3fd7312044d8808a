#include "kv/disk_tier.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
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
  open_dir();
  thread_ = std::thread([this] { run(); });
}

// DIR is the operator's (it may be a link); DIR/<root> is the tier's own: made
// here, and opened without following a link, so that every later name is
// looked up in it (openat, unlinkat, renameat) and a link put in its place,
// before or after, leads nowhere. Its lock makes one server the writer; a
// second server on the same directory reads what the first keeps and writes
// and removes nothing.
void DiskTier::open_dir() {
  std::error_code ec;
  fs::create_directories(opt_.dir, ec);
  const int base = ::open(opt_.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (base < 0) {
    writing_off("cannot use " + opt_.dir + ": " + std::strerror(errno));
    ++stats_.write_errors;
    return;
  }
  const std::string name = opt_.root.hex();
  if (::mkdirat(base, name.c_str(), 0700) != 0 && errno != EEXIST) {
    writing_off("cannot make " + path_ + ": " + std::strerror(errno));
    ++stats_.write_errors;
    ::close(base);
    return;
  }
  dir_ = ::openat(base, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  const int err = errno;
  ::close(base);
  if (dir_ < 0) {
    writing_off(path_ + (err == ELOOP || err == ENOTDIR ? " is a symbolic link or not a directory; it is not used"
                                                          : std::string(": ") + std::strerror(err)));
    ++stats_.write_errors;
    return;
  }
  if (::flock(dir_, LOCK_EX | LOCK_NB) != 0) {
    reader_ = true;
    std::fprintf(stderr, "kv-disk: %s is another server's (locked): this one reads its files and writes none\n",
                 path_.c_str());
  } else if (::faccessat(dir_, ".", W_OK | X_OK, 0) != 0) {
    writing_off("cannot write in " + path_ + ": " + std::strerror(errno));
    ++stats_.write_errors;
  } else {
    writable_ = true;
  }
  scan();
}
DiskTier::~DiskTier() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  if (dir_ >= 0) ::close(dir_);  // and with it the lock
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

namespace {

bool lower_hex(std::string_view s) { return s.find_first_not_of("0123456789abcdef") == std::string_view::npos; }

// The tier's own names: <32 hex>.kv and .<32 hex>.<pid>.tmp.
bool chunk_file_name(std::string_view n) { return n.size() == 35 && n.ends_with(".kv") && lower_hex(n.substr(0, 32)); }
bool temp_file_name(std::string_view n) {
  if (n.size() < 39 || n[0] != '.' || !n.ends_with(".tmp") || n[33] != '.' || !lower_hex(n.substr(1, 32))) return false;
  const std::string_view pid = n.substr(34, n.size() - 38);
  return !pid.empty() && pid.size() <= 9 && pid.find_first_not_of("0123456789") == std::string_view::npos;
}

}  // namespace

// Start-up removes exactly two kinds of file, both named as the tier names
// its own, regular files, never through a link: temporary files of a
// process that is gone (a kill during a write), and chunk files whose header
// is the tier's own (magic, this root) but whose length, layout or key does
// not match (a file cut short). Anything else is someone else's: counted,
// named in the log (the first few), and left alone. A reader (another server
// holds the lock) removes nothing.
void DiskTier::scan() {
  struct Found {
    ChunkKey key;
    uint64_t bytes;
    struct timespec mtime;
  };
  std::vector<Found> found;
  const int fd = ::dup(dir_);
  DIR* d = fd >= 0 ? ::fdopendir(fd) : nullptr;
  if (!d) {
    if (fd >= 0) ::close(fd);
    return;
  }
  std::vector<std::string> remove;
  while (const struct dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    struct stat st {};
    const bool regular = ::fstatat(dir_, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode);
    bool ours = false, good = false;
    KvFileHeader h;
    if (regular && temp_file_name(name)) {
      ours = true;
      if (written_by_live_process(name)) continue;
    } else if (regular && chunk_file_name(name)) {
      // The tier's own when it starts with the tier's magic and (when the
      // header is whole) names this root: then a mismatch is damage.
      // Without the magic, or unreadable: someone else's.
      const int f = ::openat(dir_, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
      uint8_t head[kKvFileHeaderBytes] = {};
      ssize_t got = 0;
      while (f >= 0 && got < ssize_t(sizeof head)) {
        const ssize_t r = ::pread(f, head + got, sizeof head - size_t(got), got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += r;
      }
      if (f >= 0) ::close(f);
      const bool magic = got >= 8 && std::memcmp(head, kKvFileMagic, 8) == 0;
      const KvFileError err = got == ssize_t(sizeof head) ? parse_kv_header(head, &h) : KvFileError::kShort;
      ours = magic && (err != KvFileError::kNone || h.root == opt_.root);
      good = ours && err == KvFileError::kNone && h.key == *ChunkKey::from_hex(name.substr(0, 32)) &&
             h.tokens == uint32_t(opt_.chunk_tokens) && h.data_bytes == opt_.chunk_bytes &&
             uint64_t(st.st_size) == h.file_bytes();
    }
    if (good) {
      found.push_back({h.key, h.file_bytes(), st.st_mtim});
    } else if (ours) {
      remove.push_back(name);
    } else {
      if (++stats_.foreign_files <= 5)
        std::fprintf(stderr, "kv-disk: %s/%s is not the tier's; left alone\n", path_.c_str(), name.c_str());
    }
  }
  ::closedir(d);
  for (const std::string& name : remove) {
    if (!reader_) ::unlinkat(dir_, name.c_str(), 0);
    ++stats_.bad_files;
  }
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) {
    return a.mtime.tv_sec != b.mtime.tv_sec ? a.mtime.tv_sec < b.mtime.tv_sec : a.mtime.tv_nsec < b.mtime.tv_nsec;
  });
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
    if (!reader_) removals_.push_back(victim);  // a reader only stops serving it
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
  store(chunk, data.size(), [&](uint8_t* to) { std::memcpy(to, data.data(), data.size()); }, wait);
}

void DiskTier::store(const DiskWant& chunk, size_t size, const std::function<void(uint8_t*)>& fill, bool wait) {
  const uint64_t file_bytes = kKvFileHeaderBytes + 4ull * chunk.tokens.size() + size + 8;
  std::unique_lock lock(mu_);
  if (auto it = index_.find(chunk.key); it != index_.end()) {
    touch(chunk.key, it->second);
    return;
  }
  if (wait && writable_ && size <= opt_.max_queued_bytes)
    idle_cv_.wait(lock, [&] { return queued_bytes_ + size <= opt_.max_queued_bytes || stop_ || !writable_; });
  if (!writable_ || queued_bytes_ + size > opt_.max_queued_bytes || !make_room(file_bytes)) {
    ++stats_.dropped;
    return;
  }
  Entry& e = index_[chunk.key];
  e.bytes = file_bytes;
  e.tick = ++tick_;
  bytes_ += file_bytes;
  queued_bytes_ += size;
  std::vector<uint8_t> bytes(size);
  fill(bytes.data());
  writes_.push_back({chunk, std::move(bytes)});
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
      ::unlinkat(dir_, name_of(k).c_str(), 0);
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
  const std::string final_name = name_of(w.chunk.key), final_path = path_ + "/" + final_name;
  const std::string tmp = "." + w.chunk.key.hex() + "." + std::to_string(::getpid()) + ".tmp";
  // A new file, never through a link or over one (O_EXCL: a leftover of this
  // pid's is removed first).
  ::unlinkat(dir_, tmp.c_str(), 0);
  const int fd = ::openat(dir_, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  bool ok = fd >= 0 && write_all(fd, file);
  const int err = errno;
  if (fd >= 0) ok = ::close(fd) == 0 && ok;
  ok = ok && ::renameat(dir_, tmp.c_str(), dir_, final_name.c_str()) == 0;
  if (!ok && fd >= 0) ::unlinkat(dir_, tmp.c_str(), 0);
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
bool DiskTier::read_file(const std::string& name, const DiskWant& want, std::vector<uint8_t>& data, bool* missing) {
  const int fd = ::openat(dir_, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
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
    const std::string name = name_of(want.key), p = path_ + "/" + name;
    std::vector<uint8_t> data;
    {
      std::lock_guard lock(mu_);
      if (!spare_.empty()) data = std::move(spare_.back()), spare_.pop_back();
    }
    bool missing = false;
    const bool good = read_file(name, want, data, &missing);
    if (!good) {
      {
        std::lock_guard lock(mu_);
        if (missing) {
          ++stats_.missing;
        } else {
          ++stats_.bad_files;
          std::fprintf(stderr, "kv-disk: %s is damaged; %s, its chunk is computed again\n", p.c_str(),
                       reader_ ? "left to the writer" : "removed");
        }
        forget(want.key);
      }
      if (!missing && !reader_) ::unlinkat(dir_, name.c_str(), 0);
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
