// The caller-coin walk's entry (kernels.h CoinArgs, csrc/verify/coins.cpp): a keyword entry
// (fields.h) on the addresses of the contiguous CPU tensors specops/backends/cpu.py holds.
#include "bindings/fields.h"

namespace specops {
namespace binding {
namespace {

constexpr char kCoinWalk[] = "coin_walk";
constexpr char kCoinWalkDoc[] = R"(The caller-coin tree walk (reference section 13); a malformed
request (specops._sgl_tree.malformed_sgl_requests) emits nothing.  fields, by name: B, N, V,
max_depth (N, V >= 1, 0 <= max_depth < N); addresses of contiguous tensors: target [B, N, V]
float32, candidates, next_token, next_sibling [B, N] int64, coins [B, N] and final_coins [B]
float32; relaxed (bool: thresholds other than (1, 1)), single (threshold_single), acc_scale (1, or
max(threshold_acc, ACC_CAP)); outputs (addresses): out_tokens [B, max_depth + 1] int32,
out_num_accepted [B] int32, out_nodes [B, max(max_depth, 1)] int32, out_valid [B] bool;
threads: requests run on at most this many threads.)";

CoinArgs parse_coin_walk(Fields& f, Scalars&) {
  CoinArgs a;
  a.B = count(SPECOPS_FIELD(f, B));
  a.N = count(SPECOPS_FIELD(f, N));
  a.V = count(SPECOPS_FIELD(f, V));
  a.max_depth = count(SPECOPS_FIELD(f, max_depth));
  if (a.N < 1 || a.V < 1 || a.max_depth >= a.N)
    fail("coin_walk: sizes must be N >= 1, V >= 1 and max_depth < N");
  const int64_t B = a.B;
  a.target = address<const float>(SPECOPS_FIELD(f, target), B);
  a.candidates = address<const int64_t>(SPECOPS_FIELD(f, candidates), B);
  a.next_token = address<const int64_t>(SPECOPS_FIELD(f, next_token), B);
  a.next_sibling = address<const int64_t>(SPECOPS_FIELD(f, next_sibling), B);
  a.coins = address<const float>(SPECOPS_FIELD(f, coins), B);
  a.final_coins = address<const float>(SPECOPS_FIELD(f, final_coins), B);
  a.relaxed = flag(SPECOPS_FIELD(f, relaxed));
  a.single = float(real(SPECOPS_FIELD(f, single)));
  a.acc_scale = real(SPECOPS_FIELD(f, acc_scale));
  a.out_tokens = address<int32_t>(SPECOPS_FIELD(f, out_tokens), B);
  a.out_num_accepted = address<int32_t>(SPECOPS_FIELD(f, out_num_accepted), B);
  a.out_nodes = address<int32_t>(SPECOPS_FIELD(f, out_nodes), B);
  a.out_valid = address<uint8_t>(SPECOPS_FIELD(f, out_valid), B);
  a.threads = threads(SPECOPS_FIELD(f, threads));
  return a;
}

PyMethodDef kEntries[] = {
    keyword_method<CoinArgs, parse_coin_walk, coin_walk, kCoinWalk>(kCoinWalkDoc),
};

}  // namespace

void add_coin_entries(py::module_& m) { add_entries(m, kEntries); }

}  // namespace binding
}  // namespace specops
