// The `--profile` output of the bench commands as JSON (bench/peers/scaling.sh
// reads it): milliseconds per step of each kind of operation.
#pragma once
#include <cstdio>
#include <string>

#include "engine/engine.h"
#include "model/op_profile.h"

namespace cs {

// {"ms_per_step": {op: ms, ...}, "total_ms": ..., "matmul_gbps": ...,
// "weight_mb": ...}: the forward pass's operations per step, the weights'
// read bandwidth of the matmuls (the head's included) and the weight bytes
// a step reads.
std::string profile_json(const OpProfile& p, double steps);

// An engine part's profile: profile_json of its forward passes plus the
// engine's own time per step around them ("schedule_ms", "sample_ms",
// "other_ms", "step_ms") and its steps and rows.
std::string step_profile_json(const StepProfile& p);

// A table of both parts' time per step: the engine's parts and the forward
// pass's operations.
void print_step_profiles(const StepProfile& prefill, const StepProfile& decode, std::FILE* out = stdout);

}  // namespace cs
