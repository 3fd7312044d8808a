// The CUDA backend of the layer-ops seam (model/layer_ops.h): the forward
// pass's activations in GPU memory, every layer step on the device with the
// CPU's float steps, so a forward pass gives the CPU backend's logits bit for
// bit (given the same attention):
// - quantized matrices (every type: model/cuda_matmul.h) go to the GPU at
//   load in the CPU's 16-row layouts, and the host's packed copy is freed;
//   float matrices (F32, F16, BF16) go over as the file has them (the host
//   never widens them) and multiply float activations in the CPU's order;
// - norms, RoPE, the gated FFN's activation, biases, residuals and row copies
//   by model/cuda_ops_kernels.h (model/ops_math.h's steps);
// - the output head as matmul_refined computes it (both levels on the
//   device, the tiles near each row's top refined there);
// - the token embedding looked up on the host (the file's rows, dequantized
//   as the CPU does) and its rows copied over;
// - a mixture's routing on the host (the router's logits cross over), the
//   experts' matmuls and the weighed sums on the device.
// The KV store may be the host's (its rows cross each layer: model/llama.cpp)
// or one whose KV is on the device (KvStore::on_device).
//
// Weights and norm vectors a CudaOps is handed must live as long as it does
// (a model's do): their device copies are kept by address.
#pragma once
#include "model/layer_ops.h"

namespace cs {

// Throws cs::Error when this build has no CUDA or no usable device is
// present (base/cuda.h, device_available), naming why.
const Backend& cuda_backend();

}  // namespace cs
