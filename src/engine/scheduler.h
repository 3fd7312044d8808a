// The step policy of continuous batching: which sequences run, and which of
// their tokens go into the next forward pass. Engine thread only.
//
// Admission goes through the queue in order while max_batch and the pool
// allow: a sequence joins the prefix tree with the tokens it knows (sharing
// what the tree holds; those skip prefill). A waiting sequence whose prompt
// shares chunks that a running sequence is still prefilling waits for them,
// so concurrent identical prompts are computed once. Each step takes one
// token of every decoding sequence, then prompt chunks of prefilling
// sequences in admission order up to step_tokens. When the pool cannot hold
// the step, the most recently admitted sequence is preempted: it leaves the
// tree (its chunks stay cached) and goes back to the front of the queue.
//
// Fairness (so that a few clients cannot hold every slot):
//  - The queue is ordered by work left: a sequence's remaining tokens
//    (max_tokens less what it sampled), less aging_tokens_per_s for every
//    second it has waited (a long request is not put off for ever); ties
//    first-come-first-served; sequences preempted for room first.
//  - When the batch is full and a waiting sequence has less work left than
//    a running one that has sampled its quantum since it was admitted, the
//    running one (the most work left) yields its place and waits in order:
//    short requests are not starved behind long ones, and among equals
//    nothing moves (the running ones' work left only shrinks).
//  - While another request waits, one request holds at most request_share
//    running sequences (its n completions beyond that wait, forked, for
//    their turn).
//  - A sequence whose client reads its stream but has left more than
//    kPauseBacklog events unread is paused: it leaves the batch (its chunks
//    stay cached) and waits until the client is down to kResumeBacklog.
// Preempted sequences come back with the tokens they had: greedy results
// do not change.
//
// Prompt Cache: a sequence whose prompt has cached spans starts detached and
// attaches each span's pinned chunks when its computation reaches the span
// (the tokens between spans are computed at their positions, attending to
// everything before them).
#pragma once
#include <deque>
#include <memory>
#include <vector>

#include "cache/sequence_cache.h"
#include "engine/sequence.h"

namespace cs {

// Unread events at which a reading client's request is paused, and at which
// it goes on again.
inline constexpr size_t kPauseBacklog = 256, kResumeBacklog = 64;

struct SchedulerOptions {
  bool share = true;      // join with the known tokens (false: mode none)
  int max_batch = 32;
  int step_tokens = 512;
  int request_share = 0;              // running sequences per request (0: max_batch / 2, at least 1)
  int quantum = 64;                   // tokens a sequence samples before a shorter one may take its place
  double aging_tokens_per_s = 64;     // work left forgiven per second waited
};

class Scheduler {
 public:
  Scheduler(SequenceCache& kv, SchedulerOptions opt) : kv_(kv), opt_(opt) {}

  // One token range of a sequence in the step's batch.
  struct Row {
    Sequence* seq;
    int take;     // tokens run: tokens()[cached, cached + take)
    bool logits;  // the last of them is the sequence's last known token
    int drafts = 0;  // then its draft's tokens, each a row with logits (speculative decoding)
  };

  // Queues a sequence behind the others.
  void enqueue(std::unique_ptr<Sequence> s);
  // Adds a fork of a running sequence (already in the tree) to the running set.
  void add_running(std::unique_ptr<Sequence> s);

  // Admits what fits, builds the next step (preempting as needed) into
  // `batch` and `rows`, leaving `reserve` of step_tokens to other work (a
  // schema's encoding). False when there is nothing to run. A sequence that
  // cannot fit even alone is in `stuck` (the caller ends it).
  bool plan(Batch& batch, std::vector<Row>& rows, std::vector<Sequence*>& stuck, int reserve = 0);
  // After the step's forward pass: its tokens are cached (and the spans they
  // reach are attached).
  void committed(const std::vector<Row>& rows);
  // Removes a finished sequence (leaving the tree if it runs).
  void retire(Sequence* s);

  const std::vector<std::unique_ptr<Sequence>>& running() const { return running_; }
  const std::deque<std::unique_ptr<Sequence>>& waiting() const { return waiting_; }
  bool idle() const { return running_.empty() && waiting_.empty(); }
  uint64_t preemptions() const { return preemptions_; }
  uint64_t yields() const { return yields_; }  // places given to shorter work, or over a request's share
  uint64_t pauses() const { return pauses_; }  // sequences paused for their client's unread events
  // Whether everything waiting is paused (the engine may sleep until a client reads).
  bool only_paused() const;

 private:
  void admit();
  bool try_admit(Sequence& s, int reserved);
  bool deferred(const Sequence& s) const;
  int reserved_chunks() const;
  void build(Batch& batch, std::vector<Row>& rows, int reserve) const;
  void preempt_latest();
  // Fairness (above), before admission.
  void rebalance();
  void yield(size_t running_index, bool pause);
  int share(const RequestState& r) const;
  double work_left(const Sequence& s, Clock::time_point now) const;
  void order_queue();
  // Attaches the cached spans that start where s's cache ends.
  void attach_spans(Sequence& s);

  SequenceCache& kv_;  // asked, never looked into
  SchedulerOptions opt_;
  std::vector<std::unique_ptr<Sequence>> running_;  // admission order
  std::deque<std::unique_ptr<Sequence>> waiting_;
  uint64_t admitted_ = 0;
  uint64_t preemptions_ = 0, yields_ = 0, pauses_ = 0;
};

}  // namespace cs
