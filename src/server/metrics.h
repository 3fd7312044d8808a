// GET /metrics: the engine's state in Prometheus' text format (0.0.4).
// The queue, running and KV-utilization gauges carry the semantics of the
// Kubernetes Gateway API Inference Extension's model server protocol
// (TotalQueuedRequests, TotalRunningRequests, KVCacheUtilization in 0..1),
// so an inference gateway can route between replicas (docs/deploy.md).
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "engine/engine.h"
#include "server/response_store.h"

namespace cs {

// What the HTTP layer counts: finished HTTP requests by route and status.
struct HttpCounts {
  std::map<std::pair<std::string, int>, uint64_t> responses;
  std::map<std::string, uint64_t> pml_requests;  // Prompt Cache prompts: "cached" or "(no cache)"
  std::map<std::string, uint64_t> constraints;   // requests' constraints by outcome (server.cpp constrain)
  ResponseStoreStats stored_responses;            // the Responses API's stored responses
};

std::string prometheus_text(const EngineStats& s, const HttpCounts& http, const std::string& model,
                            const std::vector<SchemaInfo>& schemas = {});

}  // namespace cs
