// `chunkserve bench matmul`: one quantized weight matrix times 1..N token
// rows, on the CPU or the GPU (--device cuda, model/cuda_matmul.h): time per
// call (the activations' quantization included), the weights' bytes read per
// second and the products' rate. Decode is bound by the weight read, so a
// one-token call's GB/s against the machine's read roofline (`bench
// attention` on the CPU; HBM's ~3.3-4.8 TB/s on an H100/H200) says how far
// the kernel is from it. On the GPU each timed call finds the L2 holding
// none of the matrix (as in a model's step, whose weights are many times
// the L2) and the device busy while the host queues it, so the time is the
// kernels' alone (--kernel picks the matmul's kernels, timed in turns). Random blocks with
// finite scales: timing only.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/cpu.h"
#include "base/cuda.h"
#include "base/error.h"
#include "base/f16.h"
#include "cli/cold_call.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "model/cuda_matmul.h"
#include "model/matmul.h"

namespace cs {
namespace {

struct MatmulBenchOptions {
  std::string type = "Q4_K", device = "cpu";
  std::vector<std::string> kernels = {"auto"};
  int64_t rows = 2048, cols = 2048;
  std::vector<int> tokens = {1, 8, 64, 512};
  int reps = 0, threads = 0;
  bool json = false, warm_l2 = false;
};

GgmlType type_named(const std::string& name) {
  for (uint32_t id = 0; id < 64; ++id)
    if (const auto t = type_info(id); t && name == t->name) return GgmlType(id);
  throw Error("bench matmul: no quantization type named '" + name + "'");
}

// Random blocks: random bytes, the fp16 scale (and minimum) of each block
// set to a small finite value, an MXFP4 block's exponent to 2^-8..2^-2.
std::vector<uint8_t> random_blocks(GgmlType t, int64_t rows, int64_t cols) {
  const TypeInfo info = *type_info(uint32_t(t));
  std::vector<uint8_t> data(size_t(rows) * size_t(cols) / info.block_elems * info.block_bytes);
  std::mt19937 rng(1);
  for (auto& v : data) v = uint8_t(rng() & 0xff);
  const size_t d_at = t == GgmlType::Q6_K ? offsetof(BlockQ6_K, d)
                      : t == GgmlType::Q2_K ? offsetof(BlockQ2_K, d)
                      : t == GgmlType::Q3_K ? offsetof(BlockQ3_K, d)
                                            : 0;
  const bool has_min = t == GgmlType::Q4_1 || t == GgmlType::Q5_1 || t == GgmlType::Q4_K || t == GgmlType::Q5_K ||
                       t == GgmlType::Q2_K;
  std::uniform_real_distribution<float> scale(0.001f, 0.05f);
  for (size_t off = 0; off + info.block_bytes <= data.size(); off += size_t(info.block_bytes)) {
    if (t == GgmlType::MXFP4) {
      data[off] = uint8_t(120 + rng() % 7);
      continue;
    }
    const uint16_t d = f32_to_f16(scale(rng)), m = f32_to_f16(-scale(rng) * 8);
    std::memcpy(&data[off + d_at], &d, 2);
    if (has_min) std::memcpy(&data[off + d_at + 2], &m, 2);
  }
  return data;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int run_bench_matmul(MatmulBenchOptions o) {
  const bool gpu = o.device == "cuda";
  if (!gpu && o.device != "cpu") throw Error("bench matmul: --device is cpu or cuda");
  if (o.reps == 0) o.reps = gpu ? 50 : 7;
  set_threads(o.threads);
  const GgmlType type = type_named(o.type);
  const int64_t block = int64_t(type_info(uint32_t(type))->block_elems);
  if (o.cols % std::max<int64_t>(block, 32))
    throw Error("bench matmul: --cols must be a multiple of " + std::to_string(std::max<int64_t>(block, 32)) + " for " +
                o.type);
  const std::vector<uint8_t> data = random_blocks(type, o.rows, o.cols);
  const Weight w = make_weight(type, o.rows, o.cols, data.data());
  const double bytes = w.packed.empty() ? double(w.rows) * double(w.row_bytes) : double(w.packed.size()) * 4.0;
  std::unique_ptr<cuda::DeviceMatrix> dw;
  std::unique_ptr<Flusher> flush;  // before each timed call (not with --warm-l2)
  std::vector<cuda::MatmulKernel> kernels;  // the GPU's, timed in turns
  for (const std::string& k : o.kernels)
    kernels.push_back(k == "tile"     ? cuda::MatmulKernel::kTile
                      : k == "split"  ? cuda::MatmulKernel::kSplit
                      : k == "stream" ? cuda::MatmulKernel::kStream
                      : k == "staged" ? cuda::MatmulKernel::kStaged
                                      : cuda::MatmulKernel::kAuto);
  if (!gpu) kernels.assign(1, cuda::MatmulKernel::kAuto);
  if (gpu) {
    std::string why;
    if (!cuda::device_available(&why)) throw Error("bench matmul --device cuda: " + why);
    dw = std::make_unique<cuda::DeviceMatrix>(w);
    if (!o.warm_l2) flush = std::make_unique<Flusher>(cuda::device_info().l2_bytes);
  }
  const int most = *std::max_element(o.tokens.begin(), o.tokens.end());
  std::vector<float> x(size_t(most) * size_t(o.cols));
  std::mt19937 rng(2);
  std::normal_distribution<float> nd;
  for (auto& v : x) v = nd(rng);
  cuda::Buffer dx, dq, dy;
  if (gpu) {
    dx = cuda::Buffer(x.size() * sizeof(float));
    cuda::to_device(dx.get(), x.data(), x.size() * sizeof(float));
    dq = cuda::Buffer(size_t(most) * size_t(o.cols / 32) * sizeof(BlockQ8));
    dy = cuda::Buffer(size_t(most) * size_t(o.rows) * sizeof(float));
  }
  if (!o.json)
    std::printf("%s %lld x %lld (%.1f MB as the kernels read it), %s\n\n| tokens | kernel | us per call | weights GB/s | TOPS |\n|---|---|---|---|---|\n",
                type_info(uint32_t(type))->name, (long long)o.rows, (long long)o.cols, bytes / 1e6,
                gpu ? cuda::device_info().name.c_str() : isa_name(cpu_isa()));
  std::vector<float> y(size_t(most) * size_t(o.rows));
  std::vector<BlockQ8> scratch;
  for (int n : o.tokens) {
    // Each rep times every kernel once, their order rotating; the first rep warms up.
    std::vector<std::vector<double>> us(kernels.size());
    for (int rep = 0; rep < o.reps + 1; ++rep)
      for (size_t i = 0; i < kernels.size(); ++i) {
        const size_t ki = (i + size_t(rep)) % kernels.size();
        double t;
        if (gpu) {
          cuda::Timer timer;
          if (flush) (*flush)();
          else cuda::spin(200);  // the launches below queued before the device reaches them
          timer.start();
          cuda::quantize_q8(dx.as<float>(), n, o.cols, dq.as<BlockQ8>());
          cuda::matmul(*dw, dq.as<BlockQ8>(), n, dy.as<float>(), kernels[ki]);
          timer.stop();
          t = timer.microseconds();
        } else {
          const auto t0 = std::chrono::steady_clock::now();
          matmul(w, x.data(), n, y.data(), scratch);
          t = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
        }
        if (rep > 0) us[ki].push_back(t);
      }
    for (size_t ki = 0; ki < kernels.size(); ++ki) {
      const double m = median(us[ki]), gbs = bytes / (m * 1e3);
      const double tops = 2.0 * double(o.rows) * double(o.cols) * n / (m * 1e6);
      const char* kname = gpu ? o.kernels[ki].c_str() : "cpu";
      if (o.json)
        std::printf("{\"type\": \"%s\", \"device\": \"%s\", \"kernel\": \"%s\", \"rows\": %lld, \"cols\": %lld, "
                    "\"tokens\": %d, \"us\": %.3f, \"weight_gbps\": %.2f, \"tops\": %.4f}\n",
                    type_info(uint32_t(type))->name, o.device.c_str(), kname, (long long)o.rows, (long long)o.cols, n,
                    m, gbs, tops);
      else
        std::printf("| %d | %s | %.2f | %.1f | %.3f |\n", n, kname, m, gbs, tops);
    }
  }
  return 0;
}

}  // namespace

Action add_bench_matmul_command(CLI::App& bench) {
  auto o = std::make_shared<MatmulBenchOptions>();
  CLI::App* c = bench.add_subcommand("matmul", "One quantized matrix times 1..N token rows: time, weight GB/s, TOPS (CPU or --device cuda)");
  c->add_option("--type", o->type, "Quantization type (Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K, ...)");
  c->add_option("--rows", o->rows, "Output rows")->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  c->add_option("--cols", o->cols, "Input columns (a multiple of the type's block)")
      ->check(CLI::Range(int64_t(32), int64_t(1) << 20));
  c->add_option("--tokens", o->tokens, "Token rows per call (several: one line each)")
      ->check(CLI::Range(1, 65536));
  c->add_option("--device", o->device, "cpu, or cuda (model/cuda_matmul.h)");
  c->add_option("--kernel", o->kernels,
                "The GPU's matmul kernels (auto: by the shape; tile, split, stream, staged), several timed in turns")
      ->check(CLI::IsMember({"auto", "tile", "split", "stream", "staged"}));
  c->add_option("-r,--reps", o->reps, "Timed calls per line (median; default 7, 50 on the GPU)")
      ->check(int_in(0, 100000));
  c->add_option("-t,--threads", o->threads, "CPU threads (0 = all cores)")->check(int_in(0, 4096));
  c->add_flag("--json", o->json, "One JSON object per line");
  c->add_flag("--warm-l2", o->warm_l2,
              "On the GPU, leave the L2 as the last call left it (the matrix there where it fits; for runs under "
              "compute-sanitizer, where reading 4x the L2 before each call is slow)");
  return [o] { return run_bench_matmul(*o); };
}

}  // namespace cs
