// pybind11 bindings of distributed/shard_passes.h (specops._C.shard_*), called by
// specops/distributed/_native.py.  Buffers are addresses (ints) of tensors the caller
// allocated, checked (device, dtype, contiguity, sizes) and keeps alive: the bindings take them
// as they come, release the GIL and run.  Keyword arguments only, as the kernel entries.
#include <pybind11/pybind11.h>

#include <cstdint>

#include "core/philox.h"
#include "distributed/shard_passes.h"
#include "simd/passes.h"

namespace py = pybind11;

namespace {

template <class T>
T* ptr(uint64_t a) {
  return reinterpret_cast<T*>(static_cast<uintptr_t>(a));
}

specops::RowRefs refs(uint64_t p, uint64_t p_row, int64_t p_stride, uint64_t q, uint64_t q_row,
                      int64_t q_stride, uint64_t y, uint64_t kind, uint64_t rho) {
  return {ptr<const float>(p), ptr<const int64_t>(p_row), p_stride, ptr<const float>(q),
          ptr<const int64_t>(q_row), q_stride, ptr<const int64_t>(y), ptr<const int8_t>(kind),
          ptr<const double>(rho)};
}

}  // namespace

void bind_shard_passes(py::module_& m) {
  m.def(
      "shard_stats",
      [](uint64_t src, uint64_t src_row, int64_t src_stride, uint64_t rows, int64_t n,
         int64_t V, int64_t stride, uint64_t inv_t, int64_t vocab_start, uint64_t stats,
         int threads) {
        specops::check_isa_env();
        py::gil_scoped_release nogil;
        specops::shard_stats(ptr<const float>(src), ptr<const int64_t>(src_row), src_stride,
                             ptr<float>(rows), n, V, stride, ptr<const float>(inv_t),
                             vocab_start, ptr<int64_t>(stats), threads);
      },
      py::kw_only(), py::arg("src"), py::arg("src_row"), py::arg("src_stride"),
      py::arg("rows"), py::arg("n"), py::arg("V"), py::arg("stride"),
      py::arg("inv_t"), py::arg("vocab_start"), py::arg("stats"), py::arg("threads"),
      "Round 1 of the sharded transform over n float32 logits rows (rows src_row of src, or "
      "in place where src is 0): x = l inv_t into rows; "
      "stats [n, 5] int64 (see csrc/distributed/shard_passes.h)");
  m.def(
      "shard_masses",
      [](uint64_t rows, int64_t n, int64_t V, int64_t stride, uint64_t m_, uint64_t thr,
         uint64_t hot, uint64_t min_p, uint64_t mass, int threads) {
        specops::check_isa_env();
        py::gil_scoped_release nogil;
        specops::shard_masses(ptr<float>(rows), n, V, stride, ptr<const float>(m_),
                              ptr<const float>(thr), ptr<const bool>(hot),
                              ptr<const float>(min_p), ptr<int64_t>(mass), threads);
      },
      py::kw_only(), py::arg("rows"), py::arg("n"), py::arg("V"), py::arg("stride"),
      py::arg("m"), py::arg("thr"), py::arg("hot"), py::arg("min_p"), py::arg("mass"),
      py::arg("threads"), "The sharded exp pass (in place) and the masses [n, 2] int64");
  m.def(
      "shard_hist",
      [](uint64_t rows, int64_t n, int64_t V, int64_t stride, bool weighted, int shift,
         uint64_t prefix, uint64_t hist, int threads) {
        if (shift < 0 || shift > 24 || shift % 8) throw py::value_error("shard_hist: shift");
        py::gil_scoped_release nogil;
        specops::shard_hist(ptr<const float>(rows), n, V, stride, weighted, shift,
                            ptr<const int64_t>(prefix), ptr<int64_t>(hist), threads);
      },
      py::kw_only(), py::arg("rows"), py::arg("n"), py::arg("V"), py::arg("stride"),
      py::arg("weighted"), py::arg("shift"), py::arg("prefix"), py::arg("hist"),
      py::arg("threads"), "One radix round's histogram, added into hist [n, 256] int64");
  m.def(
      "shard_materialize",
      [](uint64_t rows, int64_t n, int64_t V, int64_t stride, uint64_t hot, uint64_t cut,
         uint64_t div, int threads) {
        specops::check_isa_env();
        py::gil_scoped_release nogil;
        specops::shard_materialize(ptr<float>(rows), n, V, stride, ptr<const bool>(hot),
                                   ptr<const float>(cut), ptr<const double>(div), threads);
      },
      py::kw_only(), py::arg("rows"), py::arg("n"), py::arg("V"), py::arg("stride"),
      py::arg("hot"), py::arg("cut"), py::arg("div"), py::arg("threads"),
      "The sharded renormalisation over the hot rows, in place");
  m.def(
      "shard_row_sums",
      [](uint64_t p, uint64_t p_row, int64_t p_stride, uint64_t q, uint64_t q_row,
         int64_t q_stride, uint64_t y, uint64_t kind, uint64_t rho, int64_t n, int64_t V,
         bool want_p, uint64_t out, int threads) {
        specops::check_isa_env();
        const specops::RowRefs a = refs(p, p_row, p_stride, q, q_row, q_stride, y, kind, rho);
        py::gil_scoped_release nogil;
        specops::shard_row_sums(a, n, V, want_p, ptr<int64_t>(out), threads);
      },
      py::kw_only(), py::arg("p"), py::arg("p_row"), py::arg("p_stride"), py::arg("q"),
      py::arg("q_row"), py::arg("q_stride"), py::arg("y"), py::arg("kind"), py::arg("rho"),
      py::arg("n"), py::arg("V"), py::arg("want_p"), py::arg("out"), py::arg("threads"),
      "Per request, the sum of its row's weights (kind 0 p, 1 residual, 2 block, 3 min) and "
      "of trunc(p 2^60): out [n, 2] int64");
  m.def(
      "shard_draw_search",
      [](uint64_t p, uint64_t p_row, int64_t p_stride, uint64_t q, uint64_t q_row,
         int64_t q_stride, uint64_t y, uint64_t kind, uint64_t rho, int64_t n, int64_t V,
         uint64_t t, uint64_t idx, int threads) {
        specops::check_isa_env();
        const specops::RowRefs a = refs(p, p_row, p_stride, q, q_row, q_stride, y, kind, rho);
        py::gil_scoped_release nogil;
        specops::shard_draw_search(a, n, V, ptr<const int64_t>(t), ptr<int64_t>(idx), threads);
      },
      py::kw_only(), py::arg("p"), py::arg("p_row"), py::arg("p_stride"), py::arg("q"),
      py::arg("q_row"), py::arg("q_stride"), py::arg("y"), py::arg("kind"), py::arg("rho"),
      py::arg("n"), py::arg("V"), py::arg("t"), py::arg("idx"), py::arg("threads"),
      "The draw's search inside a shard: idx[r] = searchsorted(cumsum(weights), t[r], "
      "right=True) where t[r] >= 0");
  m.def(
      "shard_stream",
      [](uint64_t seed, uint64_t offset, int64_t n, int64_t positions, int64_t tag,
         uint64_t w0, uint64_t w1) {
        // The words _contract.stream computes in torch int64 arithmetic, from the same
        // Philox (core/philox.h): seed / offset [n] int64 (two's complement words), w0 / w1
        // [n, positions] int64 holding uint32 values.
        const int64_t* sd = ptr<const int64_t>(seed);
        const int64_t* of = ptr<const int64_t>(offset);
        int64_t* o0 = ptr<int64_t>(w0);
        int64_t* o1 = ptr<int64_t>(w1);
        py::gil_scoped_release nogil;
        for (int64_t r = 0; r < n; ++r)
          for (int64_t j = 0; j < positions; ++j) {
            const specops::Philox4 w = specops::stream_words(
                uint64_t(sd[r]), uint64_t(of[r]), uint64_t(j), uint32_t(tag));
            o0[r * positions + j] = int64_t(w.w[0]);
            o1[r * positions + j] = int64_t(w.w[1]);
          }
      },
      py::kw_only(), py::arg("seed"), py::arg("offset"), py::arg("n"), py::arg("positions"),
      py::arg("tag"), py::arg("w0"), py::arg("w1"),
      "Philox words (w0, w1) [n, positions] of every request's stream at (j, tag): "
      "_contract.stream in one native loop");
}
