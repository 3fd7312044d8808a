#include "server/worker_info.h"

#include "base/numa.h"

namespace cs {

using json = nlohmann::json;

json model_card(const Engine& e, const WorkerIdentity& w, long long created) {
  return {{"id", w.model_id},        {"object", "model"}, {"created", created},
          {"owned_by", "chunkserve"}, {"root", w.root},    {"parent", nullptr},
          {"max_model_len", e.n_ctx()}};
}

json server_info(const Engine& e, const WorkerIdentity& w) {
  const EngineOptions& o = e.options();
  const EngineStats s = e.stats();
  // Routers hash prompts at the events' block size; without events the
  // unit of sharing is the chunk.
  const int block = o.kv_event_block_size > 0 ? o.kv_event_block_size : o.chunk_size;
  const KvEventOptions& ev = w.kv_events;
  const bool events = !ev.endpoint.empty();
  const json kv_events = {{"enable_kv_cache_events", events},
                          {"publisher", events ? "zmq" : "null"},
                          {"endpoint", ev.endpoint},
                          {"replay_endpoint", ev.replay_endpoint.empty() ? json(nullptr) : json(ev.replay_endpoint)},
                          {"topic", ev.topic}};
  return {{"version", w.version},
          {"engine", "chunkserve"},
          {"model_path", w.model_path},
          {"served_model_name", w.model_id},
          {"architecture", e.model().config().arch},
          {"max_model_len", e.n_ctx()},
          {"chunk_size", o.chunk_size},
          {"kv_block_size", block},
          {"kv_pool_chunks", s.kv.chunks},
          {"kv_pool_bytes", s.kv.bytes},
          {"max_batch", o.max_batch},
          {"threads", s.threads},
          {"device", e.model().backend().name()},
          {"kv_device", e.kv_device()},
          {"numa", {{"policy", numa_policy_name(numa_policy())}, {"nodes", numa_nodes()}}},
          {"prefix_caching", o.prefix_caching()},
          {"kv_events", kv_events},
          {"vllm_config",
           {{"model_config", {{"model", w.root}, {"served_model_name", w.model_id}, {"max_model_len", e.n_ctx()}}},
            {"cache_config", {{"block_size", block}, {"enable_prefix_caching", o.prefix_caching()}}},
            {"kv_events_config", kv_events}}}};
}

json model_info(const Engine& e, const WorkerIdentity& w) {
  return {{"model_path", w.model_path},
          {"tokenizer_path", w.root},
          {"served_model_name", w.model_id},
          {"model_type", e.model().config().arch},
          {"is_generation", true},
          {"max_model_len", e.n_ctx()},
          {"has_image_understanding", false},
          {"has_audio_understanding", false}};
}

json load_info(const EngineStats& s) {
  const double usage = s.kv.chunks > 0 ? double(s.kv.used) / s.kv.chunks : 0.0;
  return {{"load", s.running + s.waiting},
          {"running", s.running},
          {"waiting", s.waiting},
          {"kv_cache_usage", usage},
          {"kv_chunks_used", s.kv.used},
          {"kv_chunks_cached", s.kv.cached},
          {"kv_chunks", s.kv.chunks}};
}

}  // namespace cs
