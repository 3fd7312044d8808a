// The state of one submitted request, shared by the engine thread (which
// fills it) and the client's RequestHandle (which reads it). The fields under
// "client side" are guarded by `mu`; those under "engine side" belong to the
// engine thread alone.
#pragma once
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "engine/request.h"

namespace cs {

using Clock = std::chrono::steady_clock;

struct RequestState {
  RequestState(uint64_t id, Request r) : id(id), req(std::move(r)), submitted(Clock::now()) {}

  const uint64_t id;
  const Request req;
  const Clock::time_point submitted;
  std::atomic<bool> cancel_requested{false};
  std::function<void()> wake_engine;  // set once at submit, before the engine sees the request

  // Client side (guarded by mu).
  std::mutex mu;
  std::condition_variable cv;
  std::deque<StreamEvent> events;
  bool finished = false;
  Result result;
  // Whether the client reads the events as they come (RequestHandle::next);
  // a request answered whole reads none until the end and is never paused.
  std::atomic<bool> reads_events{false};
  // The engine paused its sequences: their client has not read (scheduler.h).
  std::atomic<bool> paused{false};
  // Events the client has not read yet, when it reads them as they come.
  size_t backlog() {
    if (!reads_events.load(std::memory_order_relaxed)) return 0;
    std::lock_guard lock(mu);
    return events.size();
  }

  // Engine side.
  Result building;           // completions, usage and timings as they happen
  std::vector<bool> ended;   // per completion
  int live = 0;              // completions not ended
  bool admitted = false;     // admitted at least once
  bool first_token = false;  // a token was sampled
  bool forked = false;       // the n > 1 completions were forked

  void emit(StreamEvent ev) {
    std::lock_guard lock(mu);
    events.push_back(std::move(ev));
    cv.notify_all();
  }
  // Ends completion `index` with its finish event; after the last one,
  // publishes the result.
  void end_completion(int index, FinishReason reason, const std::string& message) {
    if (ended[size_t(index)]) return;
    ended[size_t(index)] = true;
    Completion& out = building.completions[size_t(index)];
    out.reason = reason;
    out.message = message;
    StreamEvent fin;
    fin.kind = StreamEvent::Kind::kFinish;
    fin.index = index;
    fin.reason = reason;
    fin.message = message;
    if (--live > 0) return emit(std::move(fin));
    Timings& t = building.timings;
    t.total_s = std::chrono::duration<double>(Clock::now() - submitted).count();
    if (first_token) t.decode_s = t.total_s - t.ttft_s;
    Usage& u = building.usage;
    u.rejected_prediction_tokens = std::max(0, req.n * int(req.prediction.size()) - u.accepted_prediction_tokens);
    std::lock_guard lock(mu);
    events.push_back(std::move(fin));
    result = building;
    finished = true;
    cv.notify_all();
  }
};

}  // namespace cs
