// Restores OpenMP's thread count when a test that varies it ends, also when
// an ASSERT returns early, so later tests run on the default count.
#pragma once
#include <omp.h>

namespace cs {

class SavedOmpThreads {
 public:
  SavedOmpThreads() : saved_(omp_get_max_threads()) {}
  ~SavedOmpThreads() { omp_set_num_threads(saved_); }
  SavedOmpThreads(const SavedOmpThreads&) = delete;
  SavedOmpThreads& operator=(const SavedOmpThreads&) = delete;

 private:
  int saved_;
};

}  // namespace cs
