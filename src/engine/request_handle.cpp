// RequestHandle: the client's end of a request. Every call locks the
// request's own mutex (RequestState::mu); the engine thread fills its events.
#include "engine/engine.h"
#include "engine/request_state.h"
#include "engine/scheduler.h"

namespace cs {

RequestHandle::RequestHandle(std::shared_ptr<RequestState> s) : s_(std::move(s)) {}
RequestHandle::RequestHandle(RequestHandle&&) noexcept = default;
RequestHandle& RequestHandle::operator=(RequestHandle&& o) noexcept {
  if (this != &o) {
    if (s_) cancel();
    s_ = std::move(o.s_);
  }
  return *this;
}
RequestHandle::~RequestHandle() {
  if (s_) cancel();
}

uint64_t RequestHandle::id() const { return s_->id; }

std::optional<StreamEvent> RequestHandle::next(std::chrono::milliseconds timeout) {
  s_->reads_events.store(true, std::memory_order_relaxed);
  std::unique_lock lock(s_->mu);
  s_->cv.wait_for(lock, timeout, [&] { return !s_->events.empty() || s_->finished; });
  if (s_->events.empty()) return std::nullopt;
  StreamEvent ev = std::move(s_->events.front());
  s_->events.pop_front();
  // The engine paused this request for its unread events: it may go on now.
  const bool resume = s_->events.size() <= kResumeBacklog && s_->paused.load(std::memory_order_relaxed);
  lock.unlock();
  if (resume && s_->wake_engine) s_->wake_engine();
  return ev;
}

bool RequestHandle::done() const {
  std::lock_guard lock(s_->mu);
  return s_->finished && s_->events.empty();
}

bool RequestHandle::wait_for(std::chrono::milliseconds timeout) {
  std::unique_lock lock(s_->mu);
  return s_->cv.wait_for(lock, timeout, [&] { return s_->finished; });
}

Result RequestHandle::wait() {
  std::unique_lock lock(s_->mu);
  s_->cv.wait(lock, [&] { return s_->finished; });
  return s_->result;
}

void RequestHandle::cancel() {
  {
    std::lock_guard lock(s_->mu);
    if (s_->finished) return;
  }
  s_->cancel_requested = true;
  if (s_->wake_engine) s_->wake_engine();
}

}  // namespace cs
