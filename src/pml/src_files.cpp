// <module src="FILE">: reading a module's text from a file, as SrcFiles allows.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/fd.h"
#include "pml/pml.h"

namespace cs::pml {

namespace {

std::string quoted(const std::string& path) { return "src=\"" + path + "\""; }

// The bytes of an open regular file, at most `max` of them.
std::string read_regular(const Fd& fd, const std::string& path, size_t max, const Location& at) {
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw PmlError(at, "cannot read " + quoted(path) + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw PmlError(at, quoted(path) + " is not a regular file");
  if (size_t(st.st_size) > max)
    throw PmlError(at, quoted(path) + " has " + std::to_string(st.st_size) + " bytes, more than the " +
                           std::to_string(max) + " a module file may have");
  std::string out(size_t(st.st_size), '\0');
  size_t got = 0;
  while (got < out.size()) {
    const ssize_t n = ::read(fd.get(), out.data() + got, out.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw PmlError(at, "cannot read " + quoted(path) + ": " + std::strerror(errno));
    if (n == 0) break;  // shrank while read: what is there
    got += size_t(n);
  }
  out.resize(got);
  return out;
}

// O_NONBLOCK: opening a FIFO must not wait for a writer (it is then refused
// as not a regular file).
constexpr int kOpenFile = O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK;

// `path` below `dir`, one component at a time: no absolute path, no "." or
// "..", and no symbolic link anywhere (O_NOFOLLOW on every step), so nothing
// outside `dir` is reached whatever the tree holds.
Fd open_beneath(const std::string& dir, const std::string& path, const Location& at) {
  if (path.empty() || path[0] == '/')
    throw PmlError(at, quoted(path) + ": a module file must be a relative path below the allowed directory");
  Fd cur(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (cur.get() < 0) throw PmlError(at, "the module file directory '" + dir + "' cannot be opened: " + std::strerror(errno));
  size_t b = 0;
  for (;;) {
    const size_t e = path.find('/', b);
    const std::string part = path.substr(b, e == std::string::npos ? std::string::npos : e - b);
    if (part.empty() || part == "." || part == "..")
      throw PmlError(at, quoted(path) + ": a module file path may not hold empty, '.' or '..' components");
    const bool last = e == std::string::npos;
    Fd next(::openat(cur.get(), part.c_str(), (last ? kOpenFile : O_RDONLY | O_DIRECTORY | O_CLOEXEC) | O_NOFOLLOW));
    if (next.get() < 0) {
      const int err = errno;
      struct stat st {};
      if (::fstatat(cur.get(), part.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
        throw PmlError(at, quoted(path) + ": symbolic links are not followed below the module file directory");
      if (err == ENOENT) throw PmlError(at, quoted(path) + ": no such file below the module file directory");
      throw PmlError(at, "cannot read " + quoted(path) + ": " + std::strerror(err));
    }
    cur = std::move(next);
    if (last) return cur;
    b = e + 1;
  }
}

}  // namespace

std::string SrcFiles::read(const std::string& path, const Location& at) const {
  switch (mode) {
    case Mode::kRefuse:
      throw PmlError(at, quoted(path) + ": this schema may not read files (a server reads module files only from "
                         "the directory its operator allows with serve --pml-src-dir DIR)");
    case Mode::kConfined:
      return read_regular(open_beneath(dir, path, at), path, max_bytes, at);
    case Mode::kRelative:
      break;
  }
  const std::string full = path.starts_with("/") ? path : dir + "/" + path;
  Fd fd(::open(full.c_str(), kOpenFile));
  if (fd.get() < 0) throw PmlError(at, "cannot read '" + full + "': " + std::strerror(errno));
  return read_regular(fd, path, max_bytes, at);
}

}  // namespace cs::pml
