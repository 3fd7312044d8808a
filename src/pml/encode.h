// A schema's modules encoded into pinned chunks (Prompt Cache §3.3).
//
// Encoding runs each scaffold of the schema through the model once, as one
// sequence at its layout's position IDs (in slices, inside the engine's
// steps): the default scaffold takes every
// union's scaffold member (a union without one contributes nothing), and
// each other member gets a scaffold of its own with it swapped in (and the
// unions around it set to hold it). A segment's K/V come from the scaffold of
// the nearest module around it that is not a default member (the default
// scaffold for the rest). Parameters are encoded as their scaffold text
// padded to their length; their values, like modules with cache="false",
// are computed per prompt and not stored. Every stored segment starts a
// fresh chunk.
#pragma once
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cache/prefix_kv.h"
#include "model/llama.h"
#include "pml/assemble.h"

namespace cs::pml {

struct EncodedSchema {
  Schema schema;  // the layout's nodes point into it
  Layout layout;
  std::vector<std::vector<ChunkId>> chunks;  // per layout segment: its pinned chunks (empty: not stored)
  int tokens = 0;                            // tokens stored
  size_t bytes = 0;                          // bytes of their chunks
  int scaffolds = 0;
  double seconds = 0;                        // encoding time (restored: reading and pinning)
  bool restored = false;                     // read from a saved schema (pml/store.h), not encoded
};

struct TextModel {
  Encoder encode;
  RoleMarkers roles;
  std::vector<int32_t> bos;  // the tokens a text starts with
  std::string reply_start;   // where the model's reply begins
  int32_t pad = 0;           // fills parameter placeholders
};
// The model's tokenizer and chat template as PML needs them.
TextModel text_model(const LlamaModel& model);

// A schema's encoding done a slice at a time, so that it can ride in the
// engine's steps beside the requests (kv/split_kv.h): each scaffold runs as
// one sequence in a private store (scratch()); when a scaffold's last slice
// has run, its stored segments are copied into pinned chunks of the tree.
// Slicing does not change the K/V (every row is computed alone).
class SchemaEncoding {
 public:
  // Lays the schema out (throws PmlError) and plans its scaffolds.
  SchemaEncoding(Schema s, const TextModel& tm, const KvLayout& layout, int n_heads);
  ~SchemaEncoding();
  SchemaEncoding(const SchemaEncoding&) = delete;
  SchemaEncoding& operator=(const SchemaEncoding&) = delete;

  const std::string& name() const { return name_; }
  int total() const { return total_; }  // tokens to run through the model
  int done() const { return done_; }    // of which run
  bool finished() const { return scaffold_ >= owners_.size(); }

  // Appends the next tokens of the current scaffold, at most `max` (> 0), to
  // `batch` for scratch(); returns how many. The first slice of a scaffold
  // makes its private store: call from the thread that runs the slices.
  int add_slice(Batch& batch, int max);
  KvStore& scratch();
  // The slice's forward pass ran. When it completed a scaffold, that
  // scaffold's stored segments are pinned in `kv`; throws Error when the
  // pool has no room (call abandon()).
  void ran(PrefixKv& kv);
  // Unpins what was pinned (after an error).
  void abandon(PrefixKv& kv);
  // The encoded schema, once finished().
  std::unique_ptr<EncodedSchema> take();

 private:
  void start_scaffold();
  void pin_scaffold(PrefixKv& kv);

  std::unique_ptr<EncodedSchema> e_;
  std::string name_;
  const TextModel& tm_;
  KvLayout layout_;
  int n_heads_;
  std::vector<int> owners_;                // per scaffold: the module it is for (0: the default one)
  std::vector<std::vector<bool>> included_;  // per scaffold: its modules
  int total_ = 0, done_ = 0;
  size_t scaffold_ = 0;  // the one running
  // The running scaffold: its tokens in position order, where each segment's
  // tokens are in them (first, count; first -1: not included), how many ran.
  std::vector<int32_t> toks_, pos_;
  std::vector<std::pair<int, int>> where_;
  size_t next_ = 0;
  size_t pending_ = 0;  // tokens of the last slice
  std::unique_ptr<PrefixKv> scratch_;
  std::chrono::steady_clock::time_point t0_;
};

// Encodes `s` into pinned chunks of `kv` alone, in slices of 512 tokens.
// `progress(done, total)` counts tokens run through the model. Throws Error
// when the pool cannot hold the schema (whatever was pinned is released).
std::unique_ptr<EncodedSchema> encode_schema(Schema s, const LlamaModel& model, PrefixKv& kv, const TextModel& tm,
                                             const std::function<void(int, int)>& progress = {});
// A fresh group for the pinned chunks of one stored segment (unique in the
// process).
uint64_t new_pin_group();

// Unpins the schema's chunks (none may be read by a live sequence).
void release_schema(PrefixKv& kv, const EncodedSchema& e);

}  // namespace cs::pml
