// pybind11 bindings of the torch-free kernels.  Every tensor is passed as a raw address
// (Python int from tensor.data_ptr()) plus sizes and strides; specops/backends/cpu.py does the
// marshalling and keeps the tensors alive.  The GIL is released in every call.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <stdexcept>
#include <tuple>

#include "kernels.h"
#include "philox.h"
#include "pexp.h"

namespace py = pybind11;
using specops::Mat;

namespace {

template <class T>
T* P(uintptr_t a) {
  return reinterpret_cast<T*>(a);
}

Mat make_mat(uintptr_t ptr, int dtype, int64_t rows, int64_t cols, int64_t stride) {
  if (dtype < 0 || dtype > 2) throw std::invalid_argument("specops._C: bad dtype code");
  if (rows < 0 || cols < 0) throw std::invalid_argument("specops._C: negative size");
  Mat m;
  m.ptr = reinterpret_cast<const void*>(ptr);
  m.dtype = dtype;
  m.rows = ptr ? rows : 0;
  m.cols = cols;
  m.stride = stride;
  return m;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "specops CPU kernels (torch-free C++; see specops/reference.py for the spec)";

  m.def(
      "verify",
      [](uintptr_t target, int target_dtype, int64_t N, int64_t V, int64_t target_stride,
         bool target_is_probs, uintptr_t target_row_start, uintptr_t draft_ids,
         int64_t num_ids, uintptr_t draft_row_start, uintptr_t num_draft, uintptr_t draft,
         int draft_dtype, int64_t T, int64_t Vd, int64_t draft_stride, bool draft_is_probs,
         uintptr_t inv_temp, uintptr_t top_k, uintptr_t top_p, uintptr_t min_p,
         uintptr_t seed, uintptr_t offset, int64_t B, int64_t max_k, uintptr_t out_tokens,
         uintptr_t out_num_accepted, uintptr_t out_valid) {
        if (B < 0 || max_k < 0) throw std::invalid_argument("specops._C.verify: B, max_k >= 0");
        if (target_is_probs && target_dtype != specops::kF32)
          throw std::invalid_argument("specops._C.verify: target probs must be float32");
        if (draft && draft_is_probs && draft_dtype != specops::kF32)
          throw std::invalid_argument("specops._C.verify: draft probs must be float32");
        specops::VerifyArgs a;
        a.target = make_mat(target, target_dtype, N, V, target_stride);
        a.target_is_probs = target_is_probs;
        a.target_row_start = P<const int64_t>(target_row_start);
        a.draft_ids = P<const int64_t>(draft_ids);
        a.num_ids = num_ids;
        a.draft_row_start = P<const int64_t>(draft_row_start);
        a.num_draft = P<const int64_t>(num_draft);
        a.draft = make_mat(draft, draft_dtype, T, Vd, draft_stride);
        a.draft_is_probs = draft_is_probs;
        a.inv_temp = P<const float>(inv_temp);
        a.top_k = P<const int64_t>(top_k);
        a.top_p = P<const float>(top_p);
        a.min_p = P<const float>(min_p);
        a.seed = P<const int64_t>(seed);
        a.offset = P<const int64_t>(offset);
        a.B = B;
        a.max_k = max_k;
        a.out_tokens = P<int32_t>(out_tokens);
        a.out_num_accepted = P<int32_t>(out_num_accepted);
        a.out_valid = P<uint8_t>(out_valid);
        specops::verify(a);
      },
      py::call_guard<py::gil_scoped_release>());

  m.def(
      "sampling_probs",
      [](uintptr_t logits, int dtype, int64_t N, int64_t V, int64_t stride, uintptr_t inv_temp,
         uintptr_t top_k, uintptr_t top_p, uintptr_t min_p, uintptr_t out_probs,
         uintptr_t out_valid) {
        const Mat lg = make_mat(logits, dtype, N, V, stride);
        specops::sampling_probs(lg, P<const float>(inv_temp), P<const int64_t>(top_k),
                                P<const float>(top_p), P<const float>(min_p),
                                P<float>(out_probs), P<uint8_t>(out_valid));
      },
      py::call_guard<py::gil_scoped_release>());

  auto probs_args = [](uintptr_t target, int64_t N, int64_t V, int64_t target_stride,
                       uintptr_t target_row_start, uintptr_t draft_ids, int64_t num_ids,
                       uintptr_t draft_row_start, uintptr_t num_draft, uintptr_t draft,
                       int64_t T, int64_t Vd, int64_t draft_stride, uintptr_t greedy,
                       uintptr_t seed, uintptr_t offset, int64_t B, int64_t max_k) {
    if (B < 0 || max_k < 0) throw std::invalid_argument("specops._C: B, max_k >= 0");
    specops::ProbsOpArgs a;
    a.target = make_mat(target, specops::kF32, N, V, target_stride);
    a.target_row_start = P<const int64_t>(target_row_start);
    a.draft_ids = P<const int64_t>(draft_ids);
    a.num_ids = num_ids;
    a.draft_row_start = P<const int64_t>(draft_row_start);
    a.num_draft = P<const int64_t>(num_draft);
    a.draft = make_mat(draft, specops::kF32, T, Vd, draft_stride);
    a.greedy = P<const uint8_t>(greedy);
    a.seed = P<const int64_t>(seed);
    a.offset = P<const int64_t>(offset);
    a.B = B;
    a.max_k = max_k;
    return a;
  };

  m.def(
      "accept",
      [probs_args](uintptr_t target, int64_t N, int64_t V, int64_t target_stride,
                   uintptr_t target_row_start, uintptr_t draft_ids, int64_t num_ids,
                   uintptr_t draft_row_start, uintptr_t num_draft, uintptr_t draft, int64_t T,
                   int64_t Vd, int64_t draft_stride, uintptr_t greedy, uintptr_t seed,
                   uintptr_t offset, int64_t B, int64_t max_k, uintptr_t out_num_accepted) {
        const auto a = probs_args(target, N, V, target_stride, target_row_start, draft_ids,
                                  num_ids, draft_row_start, num_draft, draft, T, Vd,
                                  draft_stride, greedy, seed, offset, B, max_k);
        specops::accept(a, P<int32_t>(out_num_accepted));
      },
      py::call_guard<py::gil_scoped_release>());

  m.def(
      "residual_sample",
      [probs_args](uintptr_t target, int64_t N, int64_t V, int64_t target_stride,
                   uintptr_t target_row_start, uintptr_t draft_ids, int64_t num_ids,
                   uintptr_t draft_row_start, uintptr_t num_draft, uintptr_t draft, int64_t T,
                   int64_t Vd, int64_t draft_stride, uintptr_t greedy, uintptr_t seed,
                   uintptr_t offset, uintptr_t num_accepted, int64_t B, int64_t max_k,
                   uintptr_t out_tokens) {
        auto a = probs_args(target, N, V, target_stride, target_row_start, draft_ids, num_ids,
                            draft_row_start, num_draft, draft, T, Vd, draft_stride, greedy,
                            seed, offset, B, max_k);
        a.num_accepted = P<const int32_t>(num_accepted);
        specops::residual_sample(a, P<int32_t>(out_tokens));
      },
      py::call_guard<py::gil_scoped_release>());

  m.def(
      "philox",
      [](uint64_t c0, uint64_t c1, uint64_t c2, uint64_t c3, uint64_t k0, uint64_t k1) {
        specops::Philox4 w;
        {
          py::gil_scoped_release nogil;
          w = specops::philox4x32(uint32_t(c0), uint32_t(c1), uint32_t(c2), uint32_t(c3),
                                  uint32_t(k0), uint32_t(k1));
        }
        return std::make_tuple(w.w[0], w.w[1], w.w[2], w.w[3]);
      },
      "Philox4x32-10 of one counter/key (uint32 words) -> (w0, w1, w2, w3)");

  m.def(
      "pexp",
      [](py::array_t<float, py::array::c_style | py::array::forcecast> x) {
        py::array_t<float> out(x.request().shape);
        const float* in = x.data();
        float* o = out.mutable_data();
        const int64_t n = int64_t(x.size());
        {
          py::gil_scoped_release nogil;
          specops::pexp_array(in, o, n);
        }
        return out;
      },
      "The portable float32 exp (reference.pexp) over an array");

#ifdef _OPENMP
  m.attr("has_openmp") = true;
#else
  m.attr("has_openmp") = false;
#endif
}
