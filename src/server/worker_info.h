// What routers and orchestrators ask a replica besides the OpenAI API: its
// version, its configuration (vLLM's /server_info with a vllm_config, so a
// router reads the KV event block size and endpoints where it reads vLLM's),
// its model (SGLang's /get_model_info) and its load (/get_load, /v1/loads).
// Pure functions of the engine's state: server.cpp routes them.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "engine/engine.h"
#include "server/kv_events.h"

namespace cs {

// How this replica was started, as far as routers care.
struct WorkerIdentity {
  std::string version;
  std::string model_id;    // the name clients use
  std::string model_path;  // the GGUF file
  std::string root;        // what /v1/models reports as root: a tokenizer directory, else the model path
  KvEventOptions kv_events;  // its endpoint empty: no events
};

nlohmann::json model_card(const Engine& e, const WorkerIdentity& w, long long created);
nlohmann::json server_info(const Engine& e, const WorkerIdentity& w);
nlohmann::json model_info(const Engine& e, const WorkerIdentity& w);
// {"load": running + waiting requests' sequences, ...}
nlohmann::json load_info(const EngineStats& s);

}  // namespace cs
