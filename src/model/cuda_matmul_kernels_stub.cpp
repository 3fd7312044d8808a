// The device matmul's kernels in a build without CUDA: every call says so
// (model/cuda_matmul.h's DeviceMatrix already fails to allocate there).
#include "base/error.h"
#include "model/cuda_matmul_kernels.h"

namespace cs::cuda::kernels {

void quantize_q8(const float*, int64_t, void*) { throw Error("CUDA matmul: this chunkserve was built without CUDA"); }
void matmul(int, const uint32_t*, int64_t, int64_t, const void*, int, float*, int) {
  throw Error("CUDA matmul: this chunkserve was built without CUDA");
}
void matmul_many(int, int, const uint32_t* const*, const int64_t*, int64_t, const void*, int, float* const*, int) {
  throw Error("CUDA matmul: this chunkserve was built without CUDA");
}
void float_matmul(int, const void*, int64_t, int64_t, const float*, int, float*) {
  throw Error("CUDA matmul: this chunkserve was built without CUDA");
}

}  // namespace cs::cuda::kernels
