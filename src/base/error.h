// Error type for failures the caller is expected to report, not to debug:
// a malformed file, a missing model, a prompt that does not fit.
// Messages name the offending input (file, key, tensor) and the problem.
#pragma once
#include <stdexcept>
#include <string>

namespace cs {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace cs
