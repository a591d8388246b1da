// pybind11 binding of the draft_probs summary pass (csrc/verify/probs_check.cpp), kept out of
// bindings.cpp (its line budget): specops/_args.py passes the raw address of a float32 CPU
// tensor with unit column stride that it has checked.
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>

#include "kernels.h"

namespace py = pybind11;

void bind_probs_summary(py::module_& m) {
  m.def(
      "probs_summary",
      [](uint64_t addr, int64_t rows, int64_t cols, int64_t stride, int threads) {
        if (rows < 0 || cols < 0 || (rows > 0 && !addr) || stride < cols)
          throw std::invalid_argument(
              "specops._C: probs_summary: a float32 matrix view (address, rows, cols, row stride)");
        const specops::Mat v{reinterpret_cast<const void*>(uintptr_t(addr)), specops::kF32, rows,
                             cols, stride};
        specops::ProbsSummary s;
        {  // the rows are read without the GIL
          py::gil_scoped_release nogil;
          s = specops::probs_summary(v, std::max(threads, 1));
        }
        return py::make_tuple(s.lo, s.hi, s.sum_lo, s.sum_hi);
      },
      py::arg("address"), py::arg("rows"), py::arg("cols"), py::arg("stride"), py::arg("threads"),
      "draft_probs check: (lo, hi, min row sum, max row sum) of a float32 [rows, cols] view.");
}
