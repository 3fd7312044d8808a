// A batch's activations as the forward pass sees them: a buffer that says its
// shape where it is declared (llama2.c's habit), `rows` tokens of `cols`
// values, row-major. A Tensor is a view; TensorBuf holds host memory for one
// from batch to batch.
#pragma once
#include <cstddef>
#include <vector>

namespace cs {

struct Tensor {
  float* data = nullptr;
  int rows = 0, cols = 0;

  float* row(int t) const { return data + size_t(t) * size_t(cols); }
  size_t size() const { return size_t(rows) * size_t(cols); }
};

class TensorBuf {
 public:
  // A view of rows x cols values; the memory grows as needed and is kept.
  Tensor shape(int rows, int cols) {
    buf_.resize(size_t(rows) * size_t(cols));
    last_ = {buf_.data(), rows, cols};
    return last_;
  }
  // The view the last shape() gave.
  Tensor tensor() const { return last_; }

 private:
  std::vector<float> buf_;
  Tensor last_;
};

}  // namespace cs
