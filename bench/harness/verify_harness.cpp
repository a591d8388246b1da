// A torch-free driver of specops::verify for instruction counts (valgrind --tool=callgrind):
// reads the inputs `python -m bench.studies.cpu_profile --dump FILE` wrote and runs `calls` verify
// calls on them.  Built and run by bench/harness/callgrind.sh.
//
// FILE: int64 header {B, K, V, has_draft, calls}, float32 inv_t, int64 top_k, float32 top_p,
// float32 min_p (one value each), then target [B, K+1, V] float32, draft probs [B, K, V]
// float32 (if has_draft), draft ids [B, K] int64.
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kernels.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: verify_harness FILE [calls]\n");
    return 2;
  }
  std::FILE* f = std::fopen(argv[1], "rb");
  if (!f) return 2;
  int64_t h[5];
  float inv_t, top_p, min_p;
  int64_t top_k;
  bool ok = std::fread(h, sizeof h, 1, f) == 1 && std::fread(&inv_t, 4, 1, f) == 1 &&
            std::fread(&top_k, 8, 1, f) == 1 && std::fread(&top_p, 4, 1, f) == 1 &&
            std::fread(&min_p, 4, 1, f) == 1;
  const int64_t B = h[0], K = h[1], V = h[2], has_draft = h[3];
  const int64_t calls = argc > 2 ? std::atoll(argv[2]) : h[4];
  std::vector<float> target(size_t(B * (K + 1) * V)), draft(size_t(has_draft ? B * K * V : 0));
  std::vector<int64_t> ids(size_t(B * K));
  ok = ok && std::fread(target.data(), 4, target.size(), f) == target.size();
  ok = ok && std::fread(draft.data(), 4, draft.size(), f) == draft.size();
  ok = ok && std::fread(ids.data(), 8, ids.size(), f) == ids.size();
  std::fclose(f);
  if (!ok) return 3;
  std::vector<int64_t> trs((size_t)B), drs((size_t)B), seed((size_t)B), zero((size_t)B, 0);
  for (int64_t b = 0; b < B; ++b) trs[b] = b * (K + 1), drs[b] = b * K, seed[b] = b;
  const int64_t kk = K;
  specops::VerifyArgs a;
  a.target = {target.data(), specops::kF32, B * (K + 1), V, V};
  if (has_draft) a.draft = {draft.data(), specops::kF32, B * K, V, V};
  a.draft_is_probs = true;
  a.draft_ids = {ids.data(), 1, false};
  a.num_ids = B * K;
  a.target_row_start = {trs.data(), 1, false};
  a.draft_row_start = {drs.data(), 1, false};
  a.num_draft = {&kk, 0, false};
  a.params = {{&inv_t, 0}, {&top_k, 0, false}, {&top_p, 0}, {&min_p, 0}};
  a.seed = {seed.data(), 1, false};
  a.offset = {zero.data(), 1, false};
  a.B = B;
  a.max_k = K;
  // SPECOPS_HARNESS_THREADS=n: requests on n threads (specops' pool, core/parallel.cpp)
  const char* nt = std::getenv("SPECOPS_HARNESS_THREADS");
  a.threads = nt ? std::atoi(nt) : 1;
  std::vector<int32_t> tok((size_t)(B * (K + 1)), 0), nacc((size_t)B, 0);
  std::vector<uint8_t> valid((size_t)B, 0);
  a.out_tokens = tok.data();
  a.out_num_accepted = nacc.data();
  a.out_valid = valid.data();
  // SPECOPS_HARNESS_FLUSH=MB: write that many MB before each call, so that the inputs come
  // from memory rather than the shared cache (as after the torch peers in python -m bench)
  const char* fl = std::getenv("SPECOPS_HARNESS_FLUSH");
  std::vector<char> junk(size_t(fl ? std::atoll(fl) : 0) << 20);
  uint64_t hash = 0;
  std::vector<double> wall;
  const std::clock_t cpu0 = std::clock();  // the process: every thread, spinning included
  for (int64_t c = 0; c < calls; ++c) {
    for (size_t i = 0; i < junk.size(); i += 64) junk[i] = char(c + i);
    const auto t0 = std::chrono::steady_clock::now();
    specops::verify(a);
    wall.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    for (size_t i = 0; i < tok.size(); ++i) hash = hash * 1000003u + uint32_t(tok[i] + 1);
  }
  const double cpu = double(std::clock() - cpu0) / CLOCKS_PER_SEC / double(calls ? calls : 1);
  std::sort(wall.begin(), wall.end());
  const double best = wall.empty() ? 0 : wall.front();
  const double median = wall.empty() ? 0 : wall[wall.size() / 2];
  double acc = 0;
  for (int64_t b = 0; b < B; ++b) acc += nacc[b];
  std::printf("B=%lld K=%lld V=%lld threads=%d calls=%lld mean accepted %.3f hash %llu "
              "median %.3f ms cpu/call %.3f ms best %.3f ms\n",
              (long long)B, (long long)K, (long long)V, a.threads, (long long)calls,
              acc / double(B), (unsigned long long)hash, median * 1e3, cpu * 1e3, best * 1e3);
  return 0;
}
