#include "engine/generate.h"

#include "engine/schema_dir.h"
#include "pml/encode.h"
#include "pml/layout.h"

namespace cs {

GenerateResult generate(const LlamaModel& model, const std::vector<int32_t>& prompt,
                        const GenerateParams& params,
                        const std::function<void(const std::string&)>& on_text) {
  EngineOptions eo = params.engine;
  eo.max_batch = 1;
  // The default pool holds the context beside the schemas' pinned chunks.
  std::vector<pml::Schema> schemas;
  for (const std::string& f : params.schemas) schemas.push_back(pml::parse_schema_file(f));
  if (!schemas.empty() && eo.kv_memory == 0) {
    const pml::TextModel tm = pml::text_model(model);
    for (const pml::Schema& s : schemas)
      for (const pml::Segment& g : pml::lay_out(s, tm.encode, tm.roles, tm.bos).segments)
        eo.extra_chunks += (g.length + eo.chunk_size - 1) / eo.chunk_size;
  }
  Engine engine(model, eo);
  if (!engine.kv_note().empty() && params.progress) params.progress(engine.kv_note());
  GenerateResult out;
  Request r;
  if (!params.pml.empty()) {
    const auto say = [&](const std::string& line) {
      if (params.progress) params.progress(line);
    };
    const auto encoding = [&](const std::string& name) {
      return [&say, name](int done, int total) {
        say("\rencoding schema '" + name + "': " + std::to_string(done) + "/" + std::to_string(total) + " tokens");
      };
    };
    const auto report = [&](const SchemaInfo& info) {
      say((info.restored ? "\rschema '" + info.name + "': loaded from " + params.schema_dir
                         : "\rschema '" + info.name + "': encoded") +
          " (" + std::to_string(info.tokens) + " tokens, " + std::to_string(int(1000 * info.encode_s)) + " ms)\n");
      out.encode_seconds += info.encode_s;
    };
    const auto restoring = [&](const std::string& name, int done, int total) { encoding(name)(done, total); };
    if (!params.schema_dir.empty() && params.schemas.empty())
      for (const SchemaDirEntry& e : restore_schema_dir(engine, params.schema_dir, restoring)) {
        if (e.what == SchemaDirEntry::What::kSkipped) say("skipped " + e.path + ": " + e.message + "\n");
        else if (e.what == SchemaDirEntry::What::kRemovedTemporary) say("removed " + e.path + ": " + e.message + "\n");
        else report(e.info);
      }
    for (pml::Schema& s : schemas) {
      const std::string name = s.name;
      report(params.schema_dir.empty() ? engine.register_schema(std::move(s), encoding(name))
                                       : register_saved_schema(engine, std::move(s), params.schema_dir, encoding(name)));
    }
    r = engine.pml_request(params.pml, !params.no_cache);
  } else {
    r.prompt = prompt;
  }
  r.sampling = params.sampling;
  r.max_tokens = params.max_tokens;
  r.stop = params.stop;
  if (params.grammar) r.grammar = engine.compile_grammar(*params.grammar);
  if (params.top2_gaps) r.logprobs = 2;
  r.prediction = params.prediction;
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
  out.stop_sequence = c.stop_sequence;
  out.prefill_seconds = res.timings.ttft_s;
  out.decode_seconds = res.timings.decode_s;
  out.prompt_tokens = res.usage.prompt_tokens;
  out.cached_tokens = res.usage.cached_tokens;
  out.disk_tokens = res.usage.disk_tokens;
  out.sampled = res.usage.completion_tokens;
  out.drafted = res.usage.drafted_tokens;
  out.accepted = res.usage.accepted_draft_tokens;
  if (params.engine.profile) {
    engine.wait_idle(std::chrono::seconds(10));  // the last step's figures are published after its tokens
    const EngineStats st = engine.stats();
    out.prefill_profile = st.prefill_profile;
    out.decode_profile = st.decode_profile;
  }
  return out;
}

}  // namespace cs
