#include "cli/bench_profile.h"

#include <cstdio>

namespace cs {

std::string profile_json(const OpProfile& p, double steps) {
  if (steps <= 0) steps = 1;
  std::string out = "{\"ms_per_step\": {";
  char buf[128];
  for (int i = 0; i < kProfOps; ++i) {
    std::snprintf(buf, sizeof buf, "%s\"%s\": %.4f", i ? ", " : "", prof_op_name(ProfOp(i)), 1e3 * p.seconds[i] / steps);
    out += buf;
  }
  std::snprintf(buf, sizeof buf, "}, \"total_ms\": %.4f, \"matmul_gbps\": %.2f, \"weight_mb\": %.3f}",
                1e3 * p.total() / steps, p.matmul_bandwidth() / 1e9, p.weight_bytes / steps / 1e6);
  return out + buf;
}

std::string step_profile_json(const StepProfile& p) {
  const double n = p.steps ? double(p.steps) : 1.0;
  std::string fwd = profile_json(p.ops, n);
  fwd.pop_back();  // the closing brace: the engine's parts follow
  char buf[256];
  std::snprintf(buf, sizeof buf,
                ", \"schedule_ms\": %.4f, \"draft_ms\": %.4f, \"sample_ms\": %.4f, \"other_ms\": %.4f, \"step_ms\": %.4f, "
                "\"steps\": %llu, \"rows\": %llu}",
                1e3 * p.schedule_s / n, 1e3 * p.draft_s / n, 1e3 * p.sample_s / n, 1e3 * p.other_s() / n, 1e3 * p.step_s / n,
                (unsigned long long)p.steps, (unsigned long long)p.rows);
  return fwd + buf;
}

void print_step_profiles(const StepProfile& prefill, const StepProfile& decode, std::FILE* out) {
  const double np = prefill.steps ? double(prefill.steps) : 1.0, nd = decode.steps ? double(decode.steps) : 1.0;
  std::fprintf(out, "\n| part | prefill steps ms/step | decode steps ms/step |\n|---|---|---|\n");
  std::fprintf(out, "| steps (rows) | %llu (%llu) | %llu (%llu) |\n", (unsigned long long)prefill.steps,
              (unsigned long long)prefill.rows, (unsigned long long)decode.steps, (unsigned long long)decode.rows);
  for (int i = 0; i < kProfOps; ++i)
    std::fprintf(out, "| %s | %.3f | %.3f |\n", prof_op_name(ProfOp(i)), 1e3 * prefill.ops.seconds[i] / np,
                1e3 * decode.ops.seconds[i] / nd);
  std::fprintf(out, "| schedule | %.3f | %.3f |\n| (of which drafts) | %.4f | %.4f |\n| sample | %.3f | %.3f |\n| other | %.3f | %.3f |\n| **step** | %.3f | %.3f |\n",
              1e3 * prefill.schedule_s / np, 1e3 * decode.schedule_s / nd, 1e3 * prefill.draft_s / np,
              1e3 * decode.draft_s / nd, 1e3 * prefill.sample_s / np,
              1e3 * decode.sample_s / nd, 1e3 * prefill.other_s() / np, 1e3 * decode.other_s() / nd,
              1e3 * prefill.step_s / np, 1e3 * decode.step_s / nd);
}

}  // namespace cs
