// The draft_probs value check (specops/_args.py check_draft_probs) in one read of the rows:
// each row's min, max and sum by the active ISA's row_stats pass, rows spread over threads.
// (torch's aminmax and sum read the rows twice, single-threaded for one reduction each.)
#include <cmath>
#include <vector>

#include "core/parallel.h"
#include "core/rows.h"
#include "kernels.h"
#include "simd/passes.h"

namespace specops {

ProbsSummary probs_summary(const Mat& m, int threads) {
  ProbsSummary s;
  if (m.rows <= 0) return s;
  std::vector<RowStats> st(size_t(m.rows));
  parallel_for(m.rows, threads, [&](int64_t r) {
    st[size_t(r)] = passes().row_stats(f32_row(m, r), m.cols);
  });
  s.lo = s.sum_lo = INFINITY;
  s.hi = s.sum_hi = -INFINITY;
  bool nan = false;
  for (int64_t r = 0; r < m.rows; ++r) {
    const RowStats& t = st[size_t(r)];
    nan = nan || std::isnan(t.mn);
    s.lo = std::fmin(s.lo, double(t.mn));
    s.hi = std::fmax(s.hi, double(t.mx));
    s.sum_lo = std::fmin(s.sum_lo, t.sum);
    s.sum_hi = std::fmax(s.sum_hi, t.sum);
  }
  if (nan) s.lo = s.hi = NAN;
  return s;
}

}  // namespace specops
