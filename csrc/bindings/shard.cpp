// The shard-local passes' entries (specops._C.shard_*, csrc/distributed/shard_passes.h), called
// by specops/backends/cpu_shard.py: keyword entries (fields.h) on the addresses of the tensors
// the caller allocated, checked (device, dtype, contiguity, sizes) and keeps alive.
#include "bindings/fields.h"
#include "core/philox.h"
#include "distributed/shard_passes.h"

namespace specops {
namespace binding {
namespace {

// The rows of one pass: rows (address), n, V, stride.
struct Rows {
  float* rows = nullptr;
  int64_t n = 0, V = 0, stride = 0;
};

Rows read_rows(Fields& f) {
  Rows r;
  r.rows = address<float>(SPECOPS_FIELD(f, rows), 1, true);
  r.n = count(SPECOPS_FIELD(f, n));
  r.V = count(SPECOPS_FIELD(f, V));
  r.stride = count(SPECOPS_FIELD(f, stride));
  if (r.n > 0 && r.V > 0 && !r.rows) fail(std::string(f.call()) + ": rows: null address");
  return r;
}

// ---- shard_stats
struct StatsArgs {
  const float* src = nullptr;
  const int64_t* src_row = nullptr;
  int64_t src_stride = 0;
  Rows r;
  const float* inv_t = nullptr;
  int64_t vocab_start = 0;
  int64_t* stats = nullptr;
  int threads = 1;
};
StatsArgs parse_stats(Fields& f, Scalars&) {
  StatsArgs a;
  a.src = address<const float>(SPECOPS_FIELD(f, src), 0, true);
  a.src_row = address<const int64_t>(SPECOPS_FIELD(f, src_row), 0, true);
  a.src_stride = integer(SPECOPS_FIELD(f, src_stride));
  a.r = read_rows(f);
  if (a.src && !a.src_row) fail("shard_stats: src needs src_row");
  a.inv_t = address<const float>(SPECOPS_FIELD(f, inv_t), a.r.n);
  a.vocab_start = integer(SPECOPS_FIELD(f, vocab_start));
  a.stats = address<int64_t>(SPECOPS_FIELD(f, stats), a.r.n);
  a.threads = threads(SPECOPS_FIELD(f, threads));
  return a;
}
void run_stats(const StatsArgs& a) {
  shard_stats(a.src, a.src_row, a.src_stride, a.r.rows, a.r.n, a.r.V, a.r.stride, a.inv_t,
              a.vocab_start, a.stats, a.threads);
}

// ---- shard_masses
struct MassesArgs {
  Rows r;
  const float *m = nullptr, *thr = nullptr;
  const bool* hot = nullptr;
  const float* min_p = nullptr;
  int64_t* mass = nullptr;
  int threads = 1;
};
MassesArgs parse_masses(Fields& f, Scalars&) {
  MassesArgs a;
  a.r = read_rows(f);
  const int64_t n = a.r.n;
  a.m = address<const float>(SPECOPS_FIELD(f, m), n);
  a.thr = address<const float>(SPECOPS_FIELD(f, thr), n);
  a.hot = address<const bool>(SPECOPS_FIELD(f, hot), n);
  a.min_p = address<const float>(SPECOPS_FIELD(f, min_p), n);
  a.mass = address<int64_t>(SPECOPS_FIELD(f, mass), n);
  a.threads = threads(SPECOPS_FIELD(f, threads));
  return a;
}
void run_masses(const MassesArgs& a) {
  shard_masses(a.r.rows, a.r.n, a.r.V, a.r.stride, a.m, a.thr, a.hot, a.min_p, a.mass,
               a.threads);
}

// ---- shard_hist
struct HistArgs {
  Rows r;
  bool weighted = false;
  int shift = 0;
  const int64_t* prefix = nullptr;
  int64_t* hist = nullptr;
  int threads = 1;
};
HistArgs parse_hist(Fields& f, Scalars&) {
  HistArgs a;
  a.r = read_rows(f);
  a.weighted = flag(SPECOPS_FIELD(f, weighted));
  const int64_t shift = integer(SPECOPS_FIELD(f, shift));
  if (shift < 0 || shift > 24 || shift % 8) fail("shard_hist: shift must be 0, 8, 16 or 24");
  a.shift = int(shift);
  a.prefix = address<const int64_t>(SPECOPS_FIELD(f, prefix), a.r.n);
  a.hist = address<int64_t>(SPECOPS_FIELD(f, hist), a.r.n);
  a.threads = threads(SPECOPS_FIELD(f, threads));
  return a;
}
void run_hist(const HistArgs& a) {
  shard_hist(a.r.rows, a.r.n, a.r.V, a.r.stride, a.weighted, a.shift, a.prefix, a.hist,
             a.threads);
}

// ---- shard_materialize
struct MaterializeArgs {
  Rows r;
  const bool* hot = nullptr;
  const float* cut = nullptr;
  const double* div = nullptr;
  int threads = 1;
};
MaterializeArgs parse_materialize(Fields& f, Scalars&) {
  MaterializeArgs a;
  a.r = read_rows(f);
  const int64_t n = a.r.n;
  a.hot = address<const bool>(SPECOPS_FIELD(f, hot), n);
  a.cut = address<const float>(SPECOPS_FIELD(f, cut), n);
  a.div = address<const double>(SPECOPS_FIELD(f, div), n);
  a.threads = threads(SPECOPS_FIELD(f, threads));
  return a;
}
void run_materialize(const MaterializeArgs& a) {
  shard_materialize(a.r.rows, a.r.n, a.r.V, a.r.stride, a.hot, a.cut, a.div, a.threads);
}

// ---- shard_row_sums, shard_draw_search: the rows of n requests (RowRefs)
struct RefsArgs {
  RowRefs refs{};
  int64_t n = 0, V = 0;
  bool want_p = false;
  int64_t* out = nullptr;
  const int64_t* t = nullptr;
  int64_t* idx = nullptr;
  int threads = 1;
};
void read_refs(Fields& f, RefsArgs& a) {
  RowRefs& r = a.refs;
  r.p = address<const float>(SPECOPS_FIELD(f, p), 1, true);
  r.p_row = address<const int64_t>(SPECOPS_FIELD(f, p_row), 1, true);
  r.p_stride = integer(SPECOPS_FIELD(f, p_stride));
  r.q = address<const float>(SPECOPS_FIELD(f, q), 0, true);
  r.q_row = address<const int64_t>(SPECOPS_FIELD(f, q_row), 1, true);
  r.q_stride = integer(SPECOPS_FIELD(f, q_stride));
  r.y = address<const int64_t>(SPECOPS_FIELD(f, y), 1, true);
  r.kind = address<const int8_t>(SPECOPS_FIELD(f, kind), 1, true);
  r.rho = address<const double>(SPECOPS_FIELD(f, rho), 1, true);
  a.n = count(SPECOPS_FIELD(f, n));
  a.V = count(SPECOPS_FIELD(f, V));
  if (a.n > 0 && !(r.p_row && r.q_row && r.y && r.kind && r.rho))
    fail(std::string(f.call()) + ": p_row, q_row, y, kind and rho need addresses");
  if (a.n > 0 && a.V > 0 && !r.p) fail(std::string(f.call()) + ": p: null address");
}
RefsArgs parse_row_sums(Fields& f, Scalars&) {
  RefsArgs a;
  read_refs(f, a);
  a.want_p = flag(SPECOPS_FIELD(f, want_p));
  a.out = address<int64_t>(SPECOPS_FIELD(f, out), a.n);
  a.threads = threads(SPECOPS_FIELD(f, threads));
  return a;
}
void run_row_sums(const RefsArgs& a) {
  shard_row_sums(a.refs, a.n, a.V, a.want_p, a.out, a.threads);
}
RefsArgs parse_draw_search(Fields& f, Scalars&) {
  RefsArgs a;
  read_refs(f, a);
  a.t = address<const int64_t>(SPECOPS_FIELD(f, t), a.n);
  a.idx = address<int64_t>(SPECOPS_FIELD(f, idx), a.n);
  a.threads = threads(SPECOPS_FIELD(f, threads));
  return a;
}
void run_draw_search(const RefsArgs& a) {
  shard_draw_search(a.refs, a.n, a.V, a.t, a.idx, a.threads);
}

// ---- shard_stream: the words _contract.stream computes in torch int64 arithmetic, from the
// same Philox (core/philox.h): seed / offset [n] int64 (two's complement words), w0 / w1
// [n, positions] int64 holding uint32 values.
struct StreamArgs {
  const int64_t *seed = nullptr, *offset = nullptr;
  int64_t n = 0, positions = 0, tag = 0;
  int64_t *w0 = nullptr, *w1 = nullptr;
};
StreamArgs parse_stream(Fields& f, Scalars&) {
  StreamArgs a;
  a.seed = address<const int64_t>(SPECOPS_FIELD(f, seed), 1, true);
  a.offset = address<const int64_t>(SPECOPS_FIELD(f, offset), 1, true);
  a.n = count(SPECOPS_FIELD(f, n));
  a.positions = count(SPECOPS_FIELD(f, positions));
  a.tag = integer(SPECOPS_FIELD(f, tag));
  const int64_t words = a.n * a.positions;
  if (a.n > 0 && !(a.seed && a.offset)) fail("shard_stream: seed, offset: null address");
  a.w0 = address<int64_t>(SPECOPS_FIELD(f, w0), words);
  a.w1 = address<int64_t>(SPECOPS_FIELD(f, w1), words);
  return a;
}
void run_stream(const StreamArgs& a) {
  for (int64_t r = 0; r < a.n; ++r)
    for (int64_t j = 0; j < a.positions; ++j) {
      const Philox4 w =
          stream_words(uint64_t(a.seed[r]), uint64_t(a.offset[r]), uint64_t(j), uint32_t(a.tag));
      a.w0[r * a.positions + j] = int64_t(w.w[0]);
      a.w1[r * a.positions + j] = int64_t(w.w[1]);
    }
}

constexpr char kStats[] = "shard_stats";
constexpr char kMasses[] = "shard_masses";
constexpr char kHist[] = "shard_hist";
constexpr char kMaterialize[] = "shard_materialize";
constexpr char kRowSums[] = "shard_row_sums";
constexpr char kDrawSearch[] = "shard_draw_search";
constexpr char kStream[] = "shard_stream";

PyMethodDef kEntries[] = {
    keyword_method<StatsArgs, parse_stats, run_stats, kStats>(
        "Round 1 of the sharded transform over n float32 logits rows (rows src_row of src, or "
        "in place where src is 0): x = l inv_t into rows; stats [n, 5] int64 (see "
        "csrc/distributed/shard_passes.h).  fields: src, src_row, src_stride, rows, n, V, "
        "stride, inv_t, vocab_start, stats, threads"),
    keyword_method<MassesArgs, parse_masses, run_masses, kMasses>(
        "The sharded exp pass (in place) and the masses [n, 2] int64.  fields: rows, n, V, "
        "stride, m, thr, hot, min_p, mass, threads"),
    keyword_method<HistArgs, parse_hist, run_hist, kHist>(
        "One radix round's histogram, added into hist [n, 256] int64.  fields: rows, n, V, "
        "stride, weighted, shift, prefix, hist, threads"),
    keyword_method<MaterializeArgs, parse_materialize, run_materialize, kMaterialize>(
        "The sharded renormalisation over the hot rows, in place.  fields: rows, n, V, "
        "stride, hot, cut, div, threads"),
    keyword_method<RefsArgs, parse_row_sums, run_row_sums, kRowSums>(
        "Per request, the sum of its row's weights (kind 0 p, 1 residual, 2 block, 3 min) and "
        "of trunc(p 2^60): out [n, 2] int64.  fields: p, p_row, p_stride, q, q_row, q_stride, "
        "y, kind, rho, n, V, want_p, out, threads"),
    keyword_method<RefsArgs, parse_draw_search, run_draw_search, kDrawSearch>(
        "The draw's search inside a shard: idx[r] = searchsorted(cumsum(weights), t[r], "
        "right=True) where t[r] >= 0.  fields: p, p_row, p_stride, q, q_row, q_stride, y, "
        "kind, rho, n, V, t, idx, threads"),
    keyword_method<StreamArgs, parse_stream, run_stream, kStream>(
        "Philox words (w0, w1) [n, positions] of every request's stream at (j, tag): "
        "_contract.stream in one native loop.  fields: seed, offset, n, positions, tag, w0, "
        "w1"),
};

}  // namespace

void add_shard_entries(py::module_& m) { add_entries(m, kEntries); }

}  // namespace binding
}  // namespace specops
