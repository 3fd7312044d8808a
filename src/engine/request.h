// What a client gives the engine and what it gets back. A Request is token
// ids plus how to sample them; the engine streams StreamEvents (tokens and
// text in whole UTF-8 characters, then one finish event per completion) and
// ends with a Result (every completion's text, usage, timings).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "engine/sampler.h"
#include "grammar/grammar.h"
#include "kv/chunk_pool.h"

namespace cs {

// Tokens [begin, end) of a prompt whose K/V are already in pinned chunks
// (a Prompt Cache module's, encoded at these tokens' positions): the sequence
// reads them, shared with every other reader, instead of computing them.
struct CachedSpan {
  int begin = 0, end = 0;
  std::vector<ChunkId> chunks;  // their token counts add up to end - begin
};

struct Request {
  std::vector<int32_t> prompt;      // token ids, BOS/template already applied
  std::vector<int32_t> positions;   // RoPE position per prompt token (empty: 0, 1, 2, ...)
  std::vector<CachedSpan> cached;   // in order; the last prompt token is never in one
  std::shared_ptr<const void> pins; // keeps what owns the cached spans' chunks registered
  SamplingParams sampling;          // completion i samples with seed + i
  int max_tokens = 128;             // per completion
  std::vector<std::string> stop;    // stop strings (never emitted, even in part)
  int n = 1;                        // completions, forked from one prefill
  int logprobs = -1;                // -1: off; k >= 0: each token's logprob and the top k
  bool ignore_eos = false;          // generate max_tokens whatever is sampled (benchmarks)
  // A thinking model's budget: after this many tokens of a thought that has
  // not ended (opened by the prompt, think_open, or by think_start at the
  // reply's start, blanks aside; ended by think_stop), the completion's next
  // tokens are think_end (the template's own close) instead of samples.
  // -1: none.
  int think_budget = -1;
  bool think_open = false;
  std::string think_start = "<think>", think_stop = "</think>";
  std::vector<int32_t> think_end;
  // Constrained decoding (Engine::compile_grammar): each token is sampled
  // only from those the grammar allows next; end of generation only where it
  // may end. Null: unconstrained.
  std::shared_ptr<const Grammar> grammar;
  // The grammar describes the answer, not the thought (JSON: a schema, a
  // tool call). In a thought (opened by the prompt, think_open, or by
  // think_start, which the reply's first tokens may write instead of the
  // grammar's) it waits: the thought is free text that may not end the reply
  // or go on past its close in the token that writes it; the grammar starts
  // afresh where the thought ends (think_stop written, then think_resume
  // forced; or think_end forced by the budget, -1 for none). Without it a
  // grammar sees the whole reply, thought and markup included.
  bool grammar_after_thought = false;
  // A grammar that waits for its trigger (tool_choice "auto": the model may
  // answer in text or begin a call, and a call it begins follows the
  // grammar to the reply's end). The reply is free until one of these
  // texts is written in it, outside a thought; the grammar then constrains
  // the rest, from `skip` bytes into the trigger (0: its first character;
  // its size: just after it). A token that writes the trigger and goes on
  // with text the grammar refuses is drawn again without it. at_start: only
  // as the answer's first text, blanks aside. Empty: the grammar applies
  // from the reply's start.
  struct Trigger {
    std::string text;
    bool at_start = false;
    size_t skip = 0;
  };
  std::vector<Trigger> grammar_triggers;
  // What follows a think_stop the reply writes itself before the grammar of
  // the answer starts (harmony's "<|start|>assistant": the analysis message
  // ends at <|end|>, and the answer is the next message, whose channel the
  // grammar spells); empty: nothing.
  std::vector<int32_t> think_resume;
  // Speculative decoding (engine/draft.h): -1 as the engine's options say,
  // 0 off, 1 on; and the text the client expects (OpenAI's Predicted
  // Outputs), tokenized, drafted from first.
  int speculate = -1;
  std::vector<int32_t> prediction;
};

// A request the engine refuses at submit(): the message names the problem,
// `param` the request field it is about (as OpenAI's error objects do).
// kInvalid: the request itself; kBusy: too many are waiting (try again);
// kUnavailable: the engine is shutting down.
class RequestError : public Error {
 public:
  enum class Kind { kInvalid, kBusy, kUnavailable };
  RequestError(const std::string& message, std::string param, Kind kind = Kind::kInvalid)
      : Error(message), param_(std::move(param)), kind_(kind) {}
  const std::string& param() const { return param_; }
  Kind kind() const { return kind_; }

 private:
  std::string param_;
  Kind kind_;
};

// kNoRoom: the KV memory filled before the completion's first token (it has
// no text; a completion that had some ends kLength).
enum class FinishReason { kStop, kLength, kCancelled, kError, kNoRoom };
// "stop", "length", "cancelled", "error", "no_room".
const char* finish_reason_name(FinishReason r);

struct TokenLogprob {
  int32_t token;
  float logprob;  // natural log of the model's probability (raw logits, before sampling settings)
};

struct StreamEvent {
  enum class Kind { kToken, kFinish } kind = Kind::kToken;
  int index = 0;                  // which completion
  // kToken: the sampled token, the text it releases (may be empty: a UTF-8
  // character or a possible stop string still incomplete), its logprobs.
  // token -1: text held back until the end, released with no new token.
  // end_of_generation: the token ended the completion and is not part of
  // its text or tokens.
  int32_t token = -1;
  bool end_of_generation = false;
  std::string text;
  float logprob = 0;              // when the request asked for logprobs
  std::vector<TokenLogprob> top;  // the top `logprobs` alternatives, best first
  // kFinish
  FinishReason reason = FinishReason::kStop;
  std::string message;            // for kError (and why a kLength ended early)
};

struct Usage {
  int prompt_tokens = 0;
  int cached_tokens = 0;      // prompt tokens whose K/V were found in the cache (no prefill)
  int disk_tokens = 0;        // of those, read back from the disk tier
  int completion_tokens = 0;  // sampled tokens over all completions (an end-of-generation token included)
  // Predicted Outputs: the prediction's tokens the completions took, and
  // those they did not (each completion against the whole prediction).
  int accepted_prediction_tokens = 0, rejected_prediction_tokens = 0;
  // Speculative decoding: draft tokens run, and of them those taken.
  int drafted_tokens = 0, accepted_draft_tokens = 0;
};

struct Timings {
  double queued_s = 0;  // submit -> first admitted
  double ttft_s = 0;    // submit -> first token (of any completion)
  double decode_s = 0;  // first token -> finished
  double total_s = 0;   // submit -> finished
};

// A sampled token's log probability and the top alternatives (best first).
struct TokenLogprobs {
  int32_t token;
  float logprob;
  std::vector<TokenLogprob> top;
};

struct Completion {
  std::string text;
  std::vector<int32_t> tokens;  // without an end-of-generation token
  std::vector<TokenLogprobs> logprobs;  // per token of `tokens`, when the request asked
  double ttft_s = 0;                    // submit -> this completion's first token
  FinishReason reason = FinishReason::kStop;
  std::string message;
  std::string stop_sequence;  // the stop string that ended it (empty: none did)
};

struct Result {
  std::vector<Completion> completions;
  Usage usage;
  Timings timings;
  int preemptions = 0;
  int paused = 0;  // times its sequences were paused because the client left events unread
};

}  // namespace cs
