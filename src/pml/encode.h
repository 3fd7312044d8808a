// A schema's modules encoded into pinned chunks (Prompt Cache §3.3), and
// prompts turned into engine requests that read them.
//
// Encoding runs each scaffold of the schema through the model once, as one
// sequence at its layout's position IDs: the default scaffold takes every
// union's scaffold member (a union without one contributes nothing), and
// each other member gets a scaffold of its own with it swapped in (and the
// unions around it set to hold it). A segment's K/V come from the scaffold of
// the nearest module around it that is not a default member (the default
// scaffold for the rest). Parameters are encoded as their scaffold text
// padded to their length; their values, like modules with cache="false",
// are computed per prompt and not stored. Every stored segment starts a
// fresh chunk.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/request.h"
#include "kv/prefix_tree.h"
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

// Encodes `s` into pinned chunks of `tree`. `progress(done, total)` counts
// tokens run through the model. Throws Error when the pool cannot hold the
// schema (whatever was pinned is released).
std::unique_ptr<EncodedSchema> encode_schema(Schema s, const LlamaModel& model, PrefixTree& tree, const TextModel& tm,
                                             const std::function<void(int, int)>& progress = {});
// A fresh group for the pinned chunks of one stored segment (unique in the
// process).
uint64_t new_pin_group();

// Unpins the schema's chunks (none may be read by a live sequence).
void release_schema(PrefixTree& tree, const EncodedSchema& e);

// The engine request for an assembled prompt: its tokens, their positions,
// and the cached pieces as spans of pinned chunks (use_cache), or the same
// tokens at contiguous positions computed from scratch (!use_cache: the
// quality baseline).
Request prompt_request(const EncodedSchema& e, const Assembly& a, bool use_cache);

}  // namespace cs::pml
