// parallel_for over requests / rows (OpenMP when built with it, else a plain loop).
#pragma once
#include <cstdint>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace specops {

template <class F>
void parallel_for(int64_t n, F&& f) {
#ifdef _OPENMP
  if (n > 1 && omp_get_max_threads() > 1 && !omp_in_parallel()) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t i = 0; i < n; ++i) f(i);
    return;
  }
#endif
  for (int64_t i = 0; i < n; ++i) f(i);
}

}  // namespace specops
