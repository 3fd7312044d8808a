// Compiles a caller waits for only so long: an optional constraint (the
// grammar of the calls a model may begin under tool_choice "auto", which
// the server adds and the client did not ask for). On a server whose
// engine keeps the cores busy, the niced compile of a new tool set gets
// little of them and could take its whole wall budget; the request should
// not wait that long for something it can go without. So the caller waits
// `patience` seconds at most; a compile still running then goes on in the
// background, to its own budget, and its grammar joins the vocabulary's
// cache for the next request that offers the same tools (an agent's next
// turn). One compile per spec at a time, and only the caller that started
// it waits (on a server too busy to compile, one request per attempt pays
// the patience, not every one); at most max_pending at once (beyond that
// none starts: the request goes without it).
#pragma once
#include <condition_variable>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "grammar/compile_process.h"
#include "grammar/grammar.h"

namespace cs {

class LaterCompiles {
 public:
  explicit LaterCompiles(int max_pending);
  // Stops the running compiles (their children are killed) and waits for them.
  ~LaterCompiles();
  LaterCompiles(const LaterCompiles&) = delete;
  LaterCompiles& operator=(const LaterCompiles&) = delete;

  // The grammar, from the cache or compiled within `patience`; null while it
  // still compiles (at once where another caller started the compile), or
  // when max_pending compiles already run. Throws
  // GrammarError where the compile failed within `patience`. budget.cancelled
  // is replaced: a compile that goes on has no client, only this object's
  // end to stop it.
  std::shared_ptr<const Grammar> compile(const GrammarVocab& vocab, const GrammarSpec& spec, ProcessBudget budget,
                                         double patience);

  // Compiles running now (tests).
  int running() const;

 private:
  struct Job {
    std::thread thread;
    std::shared_ptr<const Grammar> grammar;
    std::exception_ptr error;
    bool done = false;
  };
  void reap();  // joins the finished jobs' threads; mu_ held

  const int max_pending_;
  mutable std::mutex mu_;
  std::condition_variable done_;
  bool stopping_ = false;
  std::map<std::string, std::shared_ptr<Job>> jobs_;  // by Grammar::key
};

}  // namespace cs
