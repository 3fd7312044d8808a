// The step policy of continuous batching: which sequences run, and which of
// their tokens go into the next forward pass. Engine thread only.
//
// Admission is first-come-first-served while max_batch and the pool allow:
// a sequence joins the prefix tree with the tokens it knows (sharing what the
// tree holds; those skip prefill). A waiting sequence whose prompt shares
// chunks that a running sequence is still prefilling waits for them, so
// concurrent identical prompts are computed once. Each step takes one token
// of every decoding sequence, then prompt chunks of prefilling sequences in
// admission order up to step_tokens. When the pool cannot hold the step, the
// most recently admitted sequence is preempted: it leaves the tree (its
// chunks stay cached) and goes back to the front of the queue.
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

struct SchedulerOptions {
  bool share = true;      // join with the known tokens (false: mode none)
  int max_batch = 32;
  int step_tokens = 512;
};

class Scheduler {
 public:
  Scheduler(SequenceCache& kv, SchedulerOptions opt) : kv_(kv), opt_(opt) {}

  // One token range of a sequence in the step's batch.
  struct Row {
    Sequence* seq;
    int take;     // tokens run: tokens()[cached, cached + take)
    bool logits;  // the last of them is the sequence's last known token
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

 private:
  void admit();
  bool try_admit(Sequence& s, int reserved);
  bool deferred(const Sequence& s) const;
  int reserved_chunks() const;
  void build(Batch& batch, std::vector<Row>& rows, int reserve) const;
  void preempt_latest();
  // Attaches the cached spans that start where s's cache ends.
  void attach_spans(Sequence& s);

  SequenceCache& kv_;  // asked, never looked into
  SchedulerOptions opt_;
  std::vector<std::unique_ptr<Sequence>> running_;  // admission order
  std::deque<std::unique_ptr<Sequence>> waiting_;
  uint64_t admitted_ = 0;
  uint64_t preemptions_ = 0;
};

}  // namespace cs
