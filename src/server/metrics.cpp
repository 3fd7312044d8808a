#include "server/metrics.h"

#include <sstream>

namespace cs {
namespace {

struct Writer {
  std::ostringstream out;
  std::string labels;  // {model="..."}

  void head(const std::string& name, const char* type, const char* help) {
    out << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n';
  }
  template <class T>
  void metric(const std::string& name, const char* type, const char* help, T v) {
    head(name, type, help);
    out << name << labels << ' ' << v << '\n';
  }
  void histogram(const std::string& name, const char* help, const Histogram& h) {
    head(name, "histogram", help);
    const std::string inner = labels.substr(1, labels.size() - 2);  // model="..."
    uint64_t cum = 0;
    for (size_t i = 0; i < h.bounds.size(); ++i) {
      cum += h.counts[i];
      out << name << "_bucket{" << inner << ",le=\"" << h.bounds[i] << "\"} " << cum << '\n';
    }
    out << name << "_bucket{" << inner << ",le=\"+Inf\"} " << h.count << '\n';
    out << name << "_sum" << labels << ' ' << h.sum << '\n' << name << "_count" << labels << ' ' << h.count << '\n';
  }
};

std::string escape(const std::string& v) {
  std::string o;
  for (char c : v) {
    if (c == '\\' || c == '"') o += '\\';
    if (c == '\n') {
      o += "\\n";
      continue;
    }
    o += c;
  }
  return o;
}

}  // namespace

std::string prometheus_text(const EngineStats& s, const HttpCounts& http, const std::string& model,
                            const std::vector<SchemaInfo>& schemas) {
  Writer w;
  w.labels = "{model=\"" + escape(model) + "\"}";
  const std::string p = "chunkserve:";
  w.metric(p + "num_requests_waiting", "gauge", "Requests queued, not yet running (TotalQueuedRequests).", s.waiting);
  w.metric(p + "num_requests_running", "gauge", "Sequences running in the engine (TotalRunningRequests).", s.running);
  w.metric(p + "kv_cache_usage_perc", "gauge",
           "KV chunks held by running sequences over the pool's capacity, 0..1 (KVCacheUtilization).",
           s.kv.chunks ? double(s.kv.used) / s.kv.chunks : 0.0);
  w.head(p + "kv_chunks", "gauge", "KV chunks by state: used (live sequences), cached (retained, evictable), free.");
  const std::string inner = w.labels.substr(1, w.labels.size() - 2);
  w.out << p << "kv_chunks{" << inner << ",state=\"used\"} " << s.kv.used << '\n'
        << p << "kv_chunks{" << inner << ",state=\"cached\"} " << s.kv.cached << '\n'
        << p << "kv_chunks{" << inner << ",state=\"free\"} " << s.kv.free << '\n'
        << p << "kv_chunks{" << inner << ",state=\"pinned\"} " << s.kv.pinned << '\n';
  w.metric(p + "kv_chunk_bytes", "gauge", "Bytes per KV chunk.", s.kv.chunk_bytes);
  w.metric(p + "kv_pool_bytes", "gauge", "Bytes of the KV pool.", s.kv.bytes);
  w.metric(p + "kv_chunks_peak", "gauge", "Most KV chunks ever allocated at once (retained ones included).", s.kv.peak);
  w.metric(p + "kv_chunks_used_peak", "gauge", "Most KV chunks live sequences ever held at once.", s.peak_kv_used);
  w.metric(p + "prompt_tokens_total", "counter", "Prompt tokens of submitted requests.", s.prompt_tokens);
  w.metric(p + "prompt_tokens_cached_total", "counter", "Prompt tokens found in the KV cache (no prefill).",
           s.prompt_tokens_cached);
  if (s.disk_on) {
    const DiskTierStats& d = s.disk;
    // Per tier: a prompt token is a pool hit, else a disk hit, else a miss of both (computed).
    w.head(p + "kv_tier_hit_tokens_total", "counter", "Prompt tokens found in each KV tier: the pool, or else the disk tier.");
    w.out << p << "kv_tier_hit_tokens_total{" << inner << ",tier=\"pool\"} " << s.prompt_tokens_cached - s.prompt_tokens_disk
          << '\n' << p << "kv_tier_hit_tokens_total{" << inner << ",tier=\"disk\"} " << s.prompt_tokens_disk << '\n';
    w.head(p + "kv_tier_miss_tokens_total", "counter",
           "Prompt tokens each KV tier did not hold when asked: the pool's go on to the disk tier, the disk's are computed.");
    w.out << p << "kv_tier_miss_tokens_total{" << inner << ",tier=\"pool\"} " << s.prompt_tokens - s.prompt_tokens_cached + s.prompt_tokens_disk
          << '\n' << p << "kv_tier_miss_tokens_total{" << inner << ",tier=\"disk\"} " << s.prompt_tokens - s.prompt_tokens_cached
          << '\n';
    w.head(p + "kv_tier_evictions_total", "counter", "KV chunks evicted from each tier by its LRU (the pool's go to the disk tier).");
    w.out << p << "kv_tier_evictions_total{" << inner << ",tier=\"pool\"} " << s.kv.evicted << '\n'
          << p << "kv_tier_evictions_total{" << inner << ",tier=\"disk\"} " << d.evicted << '\n';
    w.metric(p + "kv_disk_files", "gauge", "Disk tier: chunk files kept.", d.files);
    w.metric(p + "kv_disk_bytes", "gauge", "Disk tier: bytes of its chunk files.", d.bytes);
    w.metric(p + "kv_disk_capacity_bytes", "gauge", "Disk tier: its size (--kv-disk-size).", d.capacity_bytes);
    w.metric(p + "kv_disk_writable", "gauge",
             "Disk tier: 1 while it writes; 0 once a write failed (disk full, read-only), or while another server "
             "holds its directory (this one only reads).",
             d.writable ? 1 : 0);
    w.metric(p + "kv_disk_bytes_written_total", "counter", "Disk tier: bytes of chunk files committed.", d.bytes_written);
    w.metric(p + "kv_disk_bytes_read_total", "counter", "Disk tier: bytes of chunk files read back and checked.", d.bytes_read);
    w.metric(p + "kv_disk_chunks_written_total", "counter", "Disk tier: chunk files committed.", d.written);
    w.metric(p + "kv_disk_chunks_read_total", "counter", "Disk tier: chunks read back into the pool's reach.", d.loaded);
    w.metric(p + "kv_disk_writes_dropped_total", "counter", "Disk tier: chunks not written (queue full or writing off).",
             d.dropped);
    w.metric(p + "kv_disk_write_errors_total", "counter", "Disk tier: failed writes (each turns writing off).", d.write_errors);
    w.metric(p + "kv_disk_bad_files_total", "counter",
             "Disk tier: torn, truncated or corrupted files found (removed, never served).", d.bad_files);
    w.metric(p + "kv_disk_foreign_files", "gauge", "Disk tier: files in its directory that are not its own, left alone.",
             d.foreign_files);
    w.metric(p + "kv_disk_loads_total", "counter", "Disk tier: reads of a prompt's chunks answered.", d.loads);
    w.metric(p + "kv_disk_load_seconds_total", "counter", "Disk tier: their total time, queued to answered.",
             d.load_seconds);
  }
  w.metric(p + "prefill_tokens_total", "counter", "Tokens computed as prefill (recomputation after preemption included).",
           s.prefill_tokens);
  w.metric(p + "generation_tokens_total", "counter", "Tokens generated.", s.generated_tokens);
  w.metric(p + "requests_total", "counter", "Requests submitted to the engine.", s.requests);
  w.metric(p + "requests_finished_total", "counter", "Requests finished.", s.finished);
  w.metric(p + "requests_cancelled_total", "counter", "Requests cancelled (client gone, or shutdown).", s.cancelled);
  w.metric(p + "num_preemptions_total", "counter", "Sequences preempted for KV memory.", s.preemptions);
  w.metric(p + "fairness_yields_total", "counter",
           "Running sequences that gave their place to shorter waiting work, or that were over their request's share.",
           s.yields);
  w.metric(p + "paused_sequences_total", "counter", "Sequences paused because their client left too many events unread.",
           s.pauses);
  w.head(p + "spec_draft_tokens_total", "counter",
         "Speculative decoding: draft tokens run, by where the draft came from (a request's prediction, or its context).");
  for (DraftSource src : kDraftKinds)
    w.out << p << "spec_draft_tokens_total{" << inner << ",source=\"" << draft_source_name(src) << "\"} "
          << s.drafted[int(src)] << '\n';
  w.head(p + "spec_accepted_tokens_total", "counter",
         "Speculative decoding: draft tokens the model drew too (taken), by source; the rest were rejected.");
  for (DraftSource src : kDraftKinds)
    w.out << p << "spec_accepted_tokens_total{" << inner << ",source=\"" << draft_source_name(src) << "\"} "
          << s.draft_accepted[int(src)] << '\n';
  w.metric(p + "engine_steps_total", "counter", "Forward passes run.", s.steps);
  w.metric(p + "engine_threads", "gauge", "Compute threads the last step used.", s.threads);
  w.histogram(p + "time_to_first_token_seconds", "Time from a request's arrival to its first token.", s.ttft);
  w.histogram(p + "inter_token_latency_seconds", "Time between a sequence's consecutive tokens.", s.itl);
  w.head(p + "schema_tokens", "gauge", "Prompt Cache: tokens of each registered schema's modules held in pinned chunks.");
  for (const SchemaInfo& sc : schemas)
    w.out << p << "schema_tokens{" << inner << ",schema=\"" << escape(sc.name) << "\"} " << sc.tokens << '\n';
  w.metric(p + "schemas_encoding", "gauge", "Prompt Cache: schemas being encoded inside the engine's steps (or queued to be).",
           s.encoding);
  w.metric(p + "schema_encode_tokens_total", "counter", "Prompt Cache: tokens run through the model to encode schemas.",
           s.schema_tokens);
  w.head(p + "pml_requests_total", "counter", "Prompt Cache prompts served, with their modules from the cache or not.");
  for (const auto& [kind, n] : http.pml_requests)
    w.out << p << "pml_requests_total{" << inner << ",cache=\"" << escape(kind) << "\"} " << n << '\n';
  w.head(p + "constraints_total", "counter",
         "Requests' structured-output constraints by outcome: ready (compiled, or from the cache), invalid, "
         "over_budget, cancelled (the client left while it compiled), failed (the compiler), busy (no compile could "
         "start: as many as the server runs at once ran throughout the wait, or its wall time ran out first; a 503), "
         "pending (one of the calls a model may begin under tool_choice auto, still compiling after the second the "
         "request waits for it: it goes on for the next request with the same tools), dropped (such a constraint, "
         "which the request is served without when it is pending or its compile fails; counted beside that "
         "outcome).");
  for (const auto& [outcome, n] : http.constraints)
    w.out << p << "constraints_total{" << inner << ",outcome=\"" << escape(outcome) << "\"} " << n << '\n';
  w.metric(p + "kv_held_prefixes", "gauge", "Prefixes held from eviction for a while (cache_control breakpoints).",
           s.held_prefixes);
  w.metric(p + "kv_held_chunks", "gauge", "Distinct KV chunks the held prefixes keep (times kv_chunk_bytes: their bytes).",
           s.held_chunks);
  w.metric(p + "grammar_cache_entries", "gauge",
           "Compiled constraints kept for reuse (schemas, tool sets), least recently used out beyond a bound.",
           s.grammar_cache_entries);
  w.metric(p + "grammar_cache_bytes", "gauge", "Bytes of the kept constraints, as their bound counts them (serialized).",
           s.grammar_cache_bytes);
  w.metric(p + "responses_stored", "gauge", "Responses API: responses kept for GET and previous_response_id.",
           http.stored_responses.count);
  w.metric(p + "responses_stored_bytes", "gauge", "Responses API: bytes the stored responses hold.", http.stored_responses.bytes);
  w.metric(p + "responses_evicted_total", "counter", "Responses API: stored responses dropped for the store's bounds.",
           http.stored_responses.evicted);
  w.head(p + "http_responses_total", "counter", "HTTP responses by route and status.");
  for (const auto& [key, n] : http.responses)
    w.out << p << "http_responses_total{" << inner << ",route=\"" << escape(key.first) << "\",code=\"" << key.second
          << "\"} " << n << '\n';
  return w.out.str();
}

}  // namespace cs
