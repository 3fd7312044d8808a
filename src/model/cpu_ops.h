// The CPU backend of the layer-ops seam (model/layer_ops.h): the quantized
// matmuls of model/matmul.h (weights repacked for this CPU's kernels at
// load), the fp32 steps of model/ops.h, each split over the OpenMP threads
// where a batch is large enough to pay for it.
#pragma once
#include "model/layer_ops.h"

namespace cs {

const Backend& cpu_backend();

}  // namespace cs
