// One prompt, one completion, through the engine: what `chunkserve generate`
// and the single-sequence tests use. Text is streamed through a callback in
// whole UTF-8 characters; a stop string is never emitted, even in part.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace cs {

struct GenerateParams {
  SamplingParams sampling;
  int max_tokens = 128;
  std::vector<std::string> stop;  // stop strings
  // The engine's options (context, KV type and memory, attention mode, chunk
  // size, threads, the disk tier); its batch is 1 whatever max_batch says,
  // and kv_memory 0 holds the context beside the schemas' pinned chunks.
  EngineOptions engine;
  bool top2_gaps = false;         // record each step's top-2 gap (costs a softmax per token)
  // Prompt Cache: schemas to register (PML files), and a PML prompt that
  // imports their modules (instead of the token prompt). no_cache computes
  // the same prompt from scratch (the quality baseline).
  std::vector<std::string> schemas;
  // With schema_dir: the schemas are loaded from it when saved there (else
  // encoded and saved); without --schema files, all saved there are loaded.
  std::string schema_dir;
  std::string pml;
  bool no_cache = false;
  std::function<void(const std::string&)> progress;  // encoding progress lines
  std::optional<GrammarSpec> grammar;  // constrained decoding (GrammarError when it does not compile)
  std::vector<int32_t> prediction;     // the output expected (speculative decoding drafts from it first)
};

struct GenerateResult {
  std::vector<int32_t> tokens;   // generated ids (without the prompt)
  std::vector<float> top2_gap;   // per sampled token: top-1 minus top-2 logit (top2_gaps)
  std::string text;
  std::string stop_reason;       // "eos", "stop" (a stop string), "length"
  std::string stop_sequence;     // the stop string that ended it ("stop")
  double prefill_seconds = 0;    // time to the first token
  double decode_seconds = 0;     // first token to the end
  int prompt_tokens = 0;
  int cached_tokens = 0;         // prompt tokens served from the cache (modules, or the disk tier)
  int disk_tokens = 0;           // of those, read from the disk tier
  int sampled = 0;               // tokens sampled, an end-of-generation token included
  int drafted = 0, accepted = 0; // speculative decoding: draft tokens run, and taken
  double encode_seconds = 0;     // registering the schemas
  StepProfile prefill_profile, decode_profile;  // with params.engine.profile (EngineStats's)
};

// Throws cs::Error (RequestError) if the prompt is empty or does not fit the
// context, and for options the engine cannot take.
GenerateResult generate(const LlamaModel& model, const std::vector<int32_t>& prompt,
                        const GenerateParams& params,
                        const std::function<void(const std::string&)>& on_text = {});

}  // namespace cs
