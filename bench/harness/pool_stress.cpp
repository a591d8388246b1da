// A stress driver of specops' thread pool (csrc/core/parallel.cpp), torch-free: several
// callers at once (one holds the pool, the others run alone), thousands of short jobs with
// their own item and thread counts, nested calls and thrown exceptions; every item must run
// exactly once per job.  tests/test_cpu_native.py builds it with -fsanitize=thread and runs
// it (full tier): a data race, a lost or repeated item, or a hang fails there.
//
//   g++ -O1 -g -std=c++17 -pthread -fsanitize=thread -Icsrc bench/harness/pool_stress.cpp \
//       csrc/core/parallel.cpp -o /tmp/pool_stress && /tmp/pool_stress
#include <atomic>
#include <cstdio>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/parallel.h"

namespace {

std::atomic<long> failures{0};

void caller(unsigned seed, int jobs) {
  std::mt19937 rng(seed);
  std::vector<std::atomic<int>> hits(64);
  for (int j = 0; j < jobs; ++j) {
    const int n = 2 + int(rng() % 60), threads = 2 + int(rng() % 7);
    const bool throws = rng() % 50 == 0;
    const int bad = int(rng() % unsigned(n));
    for (int i = 0; i < n; ++i) hits[i] = 0;
    bool caught = false;
    try {
      specops::parallel_for(n, threads, [&](int64_t i) {
        hits[i]++;
        if (i % 7 == 3) {  // items of unequal cost
          volatile int x = 0;
          for (int k = 0; k < 2000; ++k) x = x + k;
        }
        if (i == 1) specops::parallel_for(3, 4, [](int64_t) {});  // nested: runs serially
        if (throws && i == bad) throw std::runtime_error("item");
      });
    } catch (const std::runtime_error&) {
      caught = true;
    }
    if (caught != throws) failures++;
    if (!throws)  // (after an exception, which other items ran is unspecified)
      for (int i = 0; i < n; ++i) failures += hits[i] != 1;
  }
}

}  // namespace

int main() {
  std::vector<std::thread> callers;
  for (unsigned c = 0; c < 3; ++c) callers.emplace_back(caller, c, 10000);
  for (std::thread& t : callers) t.join();
  caller(99, 10000);  // alone: every job on the pool
  std::printf("failures %ld\n", failures.load());
  return failures.load() == 0 ? 0 : 1;
}
