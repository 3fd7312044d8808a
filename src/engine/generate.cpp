#include "engine/generate.h"

namespace cs {

GenerateResult generate(const LlamaModel& model, const std::vector<int32_t>& prompt,
                        const GenerateParams& params,
                        const std::function<void(const std::string&)>& on_text) {
  EngineOptions eo;
  eo.mode = params.mode;
  eo.chunk_size = params.chunk_size;
  eo.kv_memory = params.kv_memory;
  eo.kv_type = params.kv_type;
  eo.max_batch = 1;
  eo.n_ctx = params.n_ctx;
  eo.threads = params.threads;
  Engine engine(model, eo);
  GenerateResult out;
  Request r;
  if (!params.pml.empty()) {
    for (const std::string& f : params.schemas) {
      const pml::Schema s = pml::parse_schema_file(f);
      const SchemaInfo info = engine.register_schema(s, [&](int done, int total) {
        if (params.progress)
          params.progress("encoding schema '" + s.name + "': " + std::to_string(done) + "/" + std::to_string(total) +
                          " tokens");
      });
      out.encode_seconds += info.encode_s;
    }
    r = engine.pml_request(params.pml, !params.no_cache);
  } else {
    r.prompt = prompt;
  }
  r.sampling = params.sampling;
  r.max_tokens = params.max_tokens;
  r.stop = params.stop;
  if (params.top2_gaps) r.logprobs = 2;
  RequestHandle h = engine.submit(std::move(r));
  bool eos = false;
  while (auto ev = h.next()) {
    if (ev->kind == StreamEvent::Kind::kFinish) {
      if (ev->reason == FinishReason::kError) throw Error(ev->message);
      continue;
    }
    if (!ev->text.empty() && on_text) on_text(ev->text);
    if (ev->token < 0) continue;  // text held back until the end
    if (ev->top.size() == 2) out.top2_gap.push_back(ev->top[0].logprob - ev->top[1].logprob);
    eos = eos || ev->end_of_generation;
  }
  const Result res = h.wait();
  const Completion& c = res.completions.at(0);
  out.tokens = c.tokens;
  out.text = c.text;
  out.stop_reason = c.reason == FinishReason::kLength ? "length" : eos ? "eos" : "stop";
  out.prefill_seconds = res.timings.ttft_s;
  out.decode_seconds = res.timings.decode_s;
  out.prompt_tokens = res.usage.prompt_tokens;
  out.cached_tokens = res.usage.cached_tokens;
  out.sampled = res.usage.completion_tokens;
  return out;
}

}  // namespace cs
