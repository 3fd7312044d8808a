// A batch's activations as the forward pass sees them: a buffer that says its
// shape where it is declared (llama2.c's habit), `rows` tokens of `cols`
// values, row-major. A Tensor is a view; TensorBuf holds the memory for one
// from batch to batch: host memory, or the GPU's for a device backend
// (model/cuda_ops.h), whose tensors' data are device addresses.
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
  // A view of rows x cols values; the memory grows as needed and is kept
  // (host memory keeps its values as it grows; device memory does not).
  Tensor shape(int rows, int cols) {
    const size_t n = size_t(rows) * size_t(cols);
    if (device_) {
      if (dev_.bytes() < n * sizeof(float)) dev_.reserve(n * sizeof(float));
      last_ = {dev_.as<float>(), rows, cols};
    } else {
      buf_.resize(n);
      last_ = {buf_.data(), rows, cols};
    }
    return last_;
  }
  // The view the last shape() gave.
  Tensor tensor() const { return last_; }
  // Where later shapes live: the GPU's memory (true) or the host's.
  void on_device(bool device) { device_ = device; }

 private:
  std::vector<float> buf_;
  cuda::Buffer dev_;
  bool device_ = false;
  Tensor last_;
};

}  // namespace cs
