// parallel_for over requests / rows: the calling thread and up to threads - 1 workers of one
// process-wide pool of std::threads (core/parallel.cpp).  No OpenMP: the module links no
// OpenMP runtime (a wheel needs nothing beyond the C and C++ runtimes, and a process that
// loads torch does not hold two OpenMP runtimes), and the caller says how many threads a call
// may use (specops/backends/cpu.py passes torch.get_num_threads(), so torch.set_num_threads
// and OMP_NUM_THREADS govern specops as they govern torch).
#pragma once
#include <cstdint>
#include <type_traits>

namespace specops {

// Runs body(ctx, i) for every i in [0, n), items handed out one at a time (requests differ in
// cost), on at most `threads` threads including the caller; returns when all are done.  An
// item's exception (the first) is rethrown here; which other items ran is then unspecified.
// Runs serially in the caller where the pool is busy: inside another parallel_for, or while
// another thread's parallel_for holds it.
void parallel_run(int64_t n, int threads, void (*body)(void*, int64_t), void* ctx);

template <class F>
void parallel_for(int64_t n, int threads, F&& f) {
  if (n <= 1 || threads <= 1) {
    for (int64_t i = 0; i < n; ++i) f(i);
    return;
  }
  using Fn = std::remove_reference_t<F>;
  parallel_run(n, threads, [](void* c, int64_t i) { (*static_cast<Fn*>(c))(i); },
               const_cast<void*>(static_cast<const void*>(&f)));
}

}  // namespace specops
