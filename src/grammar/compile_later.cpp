#include "grammar/compile_later.h"

#include <chrono>
#include <vector>

namespace cs {

LaterCompiles::LaterCompiles(int max_pending) : max_pending_(max_pending < 1 ? 1 : max_pending) {}

LaterCompiles::~LaterCompiles() {
  std::vector<std::shared_ptr<Job>> jobs;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;  // the children see it through budget.cancelled
    for (auto& [key, job] : jobs_) jobs.push_back(job);
    jobs_.clear();
  }
  for (auto& job : jobs)
    if (job->thread.joinable()) job->thread.join();
}

int LaterCompiles::running() const {
  std::lock_guard lock(mu_);
  int n = 0;
  for (const auto& [key, job] : jobs_) n += job->done ? 0 : 1;
  return n;
}

void LaterCompiles::reap() {
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    if (!it->second->done) {
      ++it;
      continue;
    }
    // Done: its thread has set the flag as its last step under the lock and
    // only returns now, so the join is short.
    if (it->second->thread.joinable()) it->second->thread.join();
    it = jobs_.erase(it);
  }
}

std::shared_ptr<const Grammar> LaterCompiles::compile(const GrammarVocab& vocab, const GrammarSpec& spec,
                                                      ProcessBudget budget, double patience) {
  if (auto g = Grammar::cached(vocab, spec)) return g;
  const std::string key = Grammar::key(spec);
  std::unique_lock lock(mu_);
  reap();
  // Another caller's compile of the same spec, still running (reap() took
  // the finished ones): that caller waited; this one does not.
  if (jobs_.count(key) || stopping_ || int(jobs_.size()) >= max_pending_) return nullptr;
  auto job = std::make_shared<Job>();
  budget.cancelled = [this] {
    std::lock_guard l(mu_);
    return stopping_;
  };
  job->thread = std::thread([this, job, &vocab, spec, budget] {
    std::shared_ptr<const Grammar> g;
    std::exception_ptr error;
    try {
      g = Grammar::compile(vocab, spec, budget);
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard l(mu_);
    job->grammar = std::move(g);
    job->error = error;
    job->done = true;
    done_.notify_all();
  });
  jobs_.emplace(key, job);
  done_.wait_for(lock, std::chrono::duration<double>(patience), [&] { return job->done; });
  if (!job->done) return nullptr;
  if (job->error) std::rethrow_exception(job->error);
  return job->grammar;
}

}  // namespace cs
