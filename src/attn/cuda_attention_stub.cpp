// CudaAttention in a build without CUDA: construction says so.
#include "attn/cuda_attention.h"
#include "base/error.h"

namespace cs {

struct CudaAttention::Impl {};
CudaAttention::CudaAttention(Options) { throw Error("CUDA attention: this chunkserve was built without CUDA"); }
CudaAttention::~CudaAttention() = default;
void CudaAttention::set_plan(const TilePlan&) {}
void CudaAttention::run(const DeviceKvMemory&, int, const float*, float*, const int32_t*) {}
int CudaAttention::tiles() const { return 0; }
int CudaAttention::merges() const { return 0; }

}  // namespace cs
