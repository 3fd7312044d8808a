// model/cuda_ops_kernels.h in a build without CUDA: never reached (CudaOps
// needs a device), each throws if it is.
#include "base/error.h"
#include "model/cuda_ops_kernels.h"

namespace cs::cuda::ops {

namespace {
[[noreturn]] void no_cuda() { throw Error("this build has no CUDA code"); }
}  // namespace

void add_rmsnorm(float*, const float*, int, int, const float*, int, float, float*, void*) { no_cuda(); }
void rmsnorm(const float*, int, int, const float*, int, float, float*, void*) { no_cuda(); }
void rope(float*, int, float*, int, int, int, const float*, const float*, int, bool) { no_cuda(); }
void add_bias(float*, int, int, const float*) { no_cuda(); }
void scale(float*, size_t, float) { no_cuda(); }
void add(float*, const float*, size_t) { no_cuda(); }
void gated(int, float*, const float*, size_t, void*) { no_cuda(); }
void combine(const float*, int, const int32_t*, const float*, int, int, float*) { no_cuda(); }
void head_levels(const float*, int64_t, void*, void*) { no_cuda(); }
void head_refine(const float*, const float*, int, int64_t, float, float*, float*) { no_cuda(); }

}  // namespace cs::cuda::ops
