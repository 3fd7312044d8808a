#include "grammar/compile_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <exception>
#include <new>
#include <system_error>

#include "base/threads.h"
#include "grammar/grammar.h"

namespace cs {
namespace {

// Which sanitizer the build has (GCC defines __SANITIZE_*, clang has
// __has_feature).
#if defined(__has_feature)
#define CS_HAS_FEATURE(x) __has_feature(x)
#else
#define CS_HAS_FEATURE(x) 0
#endif
#if defined(__SANITIZE_THREAD__) || CS_HAS_FEATURE(thread_sanitizer)
constexpr bool kThreadSanitizer = true;
#else
constexpr bool kThreadSanitizer = false;
#endif
#if defined(__SANITIZE_ADDRESS__) || CS_HAS_FEATURE(address_sanitizer)
constexpr bool kAddressSanitizer = true;
#else
constexpr bool kAddressSanitizer = false;
#endif
// Both reserve shadow memory that an address-space limit would refuse.
constexpr bool kSanitizerShadow = kThreadSanitizer || kAddressSanitizer;

// Writes all of s; false when the reader is gone.
bool write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= size_t(w);
  }
  return true;
}

// The process's address space now, in bytes (/proc/self/statm's first field).
size_t address_space() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  unsigned long pages = 0;
  if (f) {
    if (std::fscanf(f, "%lu", &pages) != 1) pages = 0;
    std::fclose(f);
  }
  return size_t(pages) * size_t(::sysconf(_SC_PAGESIZE));
}

// The child's answer pipe, for its terminate handler.
int child_out = -1;

// Work that runs threads (the grammar compiler's) may end the child with an
// exception no thread catches, most often memory its budget refused (a
// thread's stack or a worker's allocation): said as such, not as a crash.
// Nothing here allocates (the budget may be what ran out).
[[noreturn]] void child_terminate() {
  const char* reply = "Ethe grammar compiler stopped on an error it did not report";
  if (const std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::bad_alloc&) {
      reply = "M";
    } catch (const std::system_error& s) {
      if (s.code() == std::errc::resource_unavailable_try_again) reply = "M";
    } catch (...) {
    }
  }
  write_all(child_out, reply, std::strlen(reply));
  ::_exit(0);
}

[[noreturn]] void child(int out, const std::function<std::string()>& work, const ProcessBudget& b, pid_t parent) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(1);  // the parent died before the line above
  ::setpriority(PRIO_PROCESS, 0, 19);
  const rlimit core{0, 0};
  ::setrlimit(RLIMIT_CORE, &core);
  const rlim_t cpu = rlim_t(b.cpu_seconds < 1 ? 1 : b.cpu_seconds + 0.999);
  const rlimit cpu_limit{cpu, cpu + 1};  // SIGXCPU at the soft limit, SIGKILL a second later
  ::setrlimit(RLIMIT_CPU, &cpu_limit);
  if (address_space_limited()) {
    const size_t as = address_space() + b.memory_bytes;
    const rlimit as_limit{rlim_t(as), rlim_t(as)};
    ::setrlimit(RLIMIT_AS, &as_limit);
  }
  child_out = out;
  std::set_terminate(child_terminate);
  std::string reply;
  try {
    reply = "O" + work();
  } catch (const std::bad_alloc&) {
    reply = "M";
  } catch (const std::system_error& e) {  // a thread the work could not start
    reply = e.code() == std::errc::resource_unavailable_try_again ? "M" : std::string("E") + e.what();
  } catch (const std::exception& e) {
    reply = std::string("E") + e.what();
  } catch (...) {
    reply = "Eunknown error";
  }
  write_all(out, reply.data(), reply.size());
  ::_exit(0);
}

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", s);
  return buf;
}

// The places for children (run_in_child's header): taken for a child's life.
class ChildSlots {
 public:
  // Waits for a place, polling `cancelled` every 20 ms, up to twice the wall
  // budget; throws GrammarError (kCancelled, kBusy) when it gives up.
  void take(const ProcessBudget& b) {
    const int limit = b.max_children > 0 ? b.max_children : default_children(b.memory_bytes);
    std::unique_lock lock(mu_);
    // Twice the wall budget: a child that started just before may take all of its own.
    const double wait = 2 * b.wall_seconds;
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait);
    while (running_ >= limit) {
      if (b.cancelled && b.cancelled())
        throw GrammarError("the compile was stopped: the client went away", GrammarFailure::kCancelled);
      if (std::chrono::steady_clock::now() >= until)
        throw GrammarError("the server is compiling as many constraints as it runs at once (" + std::to_string(limit) +
                               ") and none ended within " + seconds(wait) + "; retry later",
                           GrammarFailure::kBusy);
      freed_.wait_for(lock, std::chrono::milliseconds(20));
    }
    ++running_;
  }
  void give_back() {
    {
      std::lock_guard lock(mu_);
      --running_;
    }
    freed_.notify_one();
  }

 private:
  std::mutex mu_;
  std::condition_variable freed_;
  int running_ = 0;
};

ChildSlots& child_slots() {
  static ChildSlots slots;
  return slots;
}

}  // namespace

bool address_space_limited() { return !kSanitizerShadow; }

bool child_may_start_threads() { return !kThreadSanitizer; }

int default_children(size_t memory_bytes) {
  const double ram = double(::sysconf(_SC_PHYS_PAGES)) * double(::sysconf(_SC_PAGESIZE));
  const int by_memory = memory_bytes > 0 && ram > 0 ? int(ram / 2 / double(memory_bytes)) : cores_available();
  return std::max(1, std::min(cores_available(), by_memory));
}

std::string run_in_child(const std::function<std::string()>& work, const ProcessBudget& b) {
  ChildSlots& slots = child_slots();
  slots.take(b);
  struct Give {  // the place back however this returns
    ChildSlots& s;
    ~Give() { s.give_back(); }
  } give{slots};
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw GrammarError(std::string("cannot start the compile: ") + std::strerror(errno));
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    throw GrammarError(std::string("cannot start the compile: ") + std::strerror(err), GrammarFailure::kCompilerFailed);
  }
  if (pid == 0) {
    ::close(fds[0]);
    child(fds[1], work, b, parent);
  }
  ::close(fds[1]);
  const auto start = std::chrono::steady_clock::now();
  std::string got;
  enum class Stop { kNone, kCancelled, kWall } stop = Stop::kNone;
  char buf[1 << 16];
  for (;;) {
    pollfd p{fds[0], POLLIN, 0};
    const int ready = ::poll(&p, 1, 20);
    if (ready > 0) {
      const ssize_t n = ::read(fds[0], buf, sizeof buf);
      if (n > 0) {
        got.append(buf, size_t(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      break;  // end of file: the child has answered (or died)
    }
    if (ready < 0 && errno != EINTR) break;
    if (b.cancelled && b.cancelled()) {
      stop = Stop::kCancelled;
      break;
    }
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > b.wall_seconds) {
      stop = Stop::kWall;
      break;
    }
  }
  ::close(fds[0]);
  if (stop != Stop::kNone) ::kill(pid, SIGKILL);
  int status = 0;
  rusage used{};
  while (::wait4(pid, &status, 0, &used) < 0 && errno == EINTR) {
  }
  if (stop == Stop::kCancelled)
    throw GrammarError("the compile was stopped: the client went away", GrammarFailure::kCancelled);
  if (stop == Stop::kWall) {
    // The CPU limit kills a child that computes too long, within the wall
    // budget on a free core: one still running at the wall deadline was
    // given too little of a core (it runs niced), which is the server's
    // load, not the constraint's fault.
    const double cpu = double(used.ru_utime.tv_sec + used.ru_stime.tv_sec) +
                       1e-6 * double(used.ru_utime.tv_usec + used.ru_stime.tv_usec);
    char ran[32];
    std::snprintf(ran, sizeof ran, "%.1f s", cpu);
    throw GrammarError("the server was too busy to compile the constraint: it had " + std::string(ran) +
                           " of CPU time in " + seconds(b.wall_seconds) + " (its budget: " + seconds(b.cpu_seconds) +
                           " of CPU time); retry later",
                       GrammarFailure::kBusy);
  }
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    if (sig == SIGXCPU || sig == SIGKILL)
      throw GrammarError("the constraint did not compile within its budget of " + seconds(b.cpu_seconds) +
                             " of CPU time",
                         GrammarFailure::kOverBudget);
    throw GrammarError(std::string("the grammar compiler failed on this constraint (") + strsignal(sig) +
                           "); its budget: " + seconds(b.cpu_seconds) + " of CPU time, " +
                           std::to_string(b.memory_bytes >> 20) + " MiB",
                       GrammarFailure::kCompilerFailed);
  }
  if (got.empty())
    throw GrammarError("the grammar compiler ended without an answer (exit status " +
                           std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) + ")",
                       GrammarFailure::kCompilerFailed);
  if (got[0] == 'M')
    throw GrammarError("the constraint did not compile within its budget of " + std::to_string(b.memory_bytes >> 20) +
                           " MiB of memory",
                       GrammarFailure::kOverBudget);
  if (got[0] == 'E') throw GrammarError(got.substr(1));
  return got.substr(1);
}

}  // namespace cs
