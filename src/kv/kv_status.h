// The one error model of the KV layer. Tree operations return a KvStatus (a
// failed call changes nothing); the KvStore seam the model writes through
// throws it as a KvError, which keeps the code so the engine can tell a full
// pool (queue or preempt) from a caller's mistake (a sequence that never
// joined).
#pragma once
#include <cstdio>
#include <cstdlib>
#include <string>

#include "base/error.h"

namespace cs {

enum class KvCode { kOk, kPoolExhausted, kUnknownSequence, kSequenceLeft, kSequenceExists, kContextFull, kInUse,
                    kInvalid };

struct [[nodiscard]] KvStatus {
  KvCode code = KvCode::kOk;
  std::string message;
  bool ok() const { return code == KvCode::kOk; }
  static KvStatus Ok() { return {}; }
};

class KvError : public Error {
 public:
  explicit KvError(KvStatus st) : Error(st.message), code_(st.code) {}
  KvCode code() const { return code_; }

 private:
  KvCode code_;
};

// A status its caller's own invariants say cannot fail (leaving a sequence
// it knows is live, say): a failure is a bug in the caller, never a
// client's doing, and stops the process naming `what` and the status rather
// than let the KV accounting and the scheduler's disagree from then on.
inline void expect_ok(const KvStatus& st, const char* what) {
  if (st.ok()) return;
  std::fprintf(stderr, "chunkserve: %s failed: %s\n", what, st.message.c_str());
  std::abort();
}

}  // namespace cs
