// A batch's activations as the forward pass sees them: a buffer that says its
// shape where it is declared (llama2.c's habit), `rows` tokens of `cols`
// values, row-major. A Tensor is a view; TensorBuf holds the memory for one
// from batch to batch: host memory, or the GPU's for a device backend
// (model/cuda_ops.h), whose tensors' data are device addresses. The backend's
// LayerOps::shape picks which.
#pragma once
#include <cstddef>
#include <vector>

#include "base/cuda.h"

namespace cs {

struct Tensor {
  float* data = nullptr;
  int rows = 0, cols = 0;

  float* row(int t) const { return data + size_t(t) * size_t(cols); }
  size_t size() const { return size_t(rows) * size_t(cols); }
};

class TensorBuf {
 public:
  // A view of rows x cols values in host memory; the memory grows as needed
  // and is kept (with its values).
  Tensor shape(int rows, int cols) {
    buf_.resize(size_t(rows) * size_t(cols));
    last_ = {buf_.data(), rows, cols};
    return last_;
  }
  // The same in the GPU's memory (a device backend's LayerOps::shape), which
  // does not keep its values as it grows.
  Tensor shape_on_device(int rows, int cols) {
    const size_t bytes = size_t(rows) * size_t(cols) * sizeof(float);
    if (dev_.bytes() < bytes) dev_.reserve(bytes);
    last_ = {dev_.as<float>(), rows, cols};
    return last_;
  }
  // The view the last shape gave.
  Tensor tensor() const { return last_; }

 private:
  std::vector<float> buf_;
  cuda::Buffer dev_;
  Tensor last_;
};

}  // namespace cs
