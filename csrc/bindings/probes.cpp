// The tests' probes of single passes at the active ISA level (tests/test_cpu_transform.py,
// test_zero_mass.py, test_quotient.py, test_tree_cpu.py): numpy arrays in, arrays out, no
// kernel entry behind them.  They are the one part of the module with pybind11 signatures
// (arrays are converted by pybind11; nothing here is on a hot path).
#include <pybind11/numpy.h>

#include <algorithm>
#include <tuple>

#include "bindings/fields.h"
#include "core/philox.h"
#include "verify/block_rows.h"

namespace specops {
namespace binding {

using FloatArray = py::array_t<float, py::array::c_style | py::array::forcecast>;

void add_probes(py::module_& m) {
  m.def(
      "philox",
      [](uint64_t c0, uint64_t c1, uint64_t c2, uint64_t c3, uint64_t k0, uint64_t k1) {
        const Philox4 w = philox4x32(uint32_t(c0), uint32_t(c1), uint32_t(c2), uint32_t(c3),
                                     uint32_t(k0), uint32_t(k1));
        return std::make_tuple(w.w[0], w.w[1], w.w[2], w.w[3]);
      },
      "Philox4x32-10 of one counter/key (uint32 words) -> (w0, w1, w2, w3)");

  m.def(
      "pexp",
      [](FloatArray x) {
        check_isa_env();
        py::array_t<float> out(x.request().shape);
        const float* in = x.data();
        float* o = out.mutable_data();
        const int64_t n = int64_t(x.size());
        {
          py::gil_scoped_release nogil;
          pexp_array(in, o, n);
        }
        return out;
      },
      "The portable float32 exp (reference.pexp) over an array, at the active ISA level");

  m.def(
      "exp_pass",
      [](FloatArray x, float mx, float thr, bool tail) {
        check_isa_env();
        py::array_t<float> out(x.request().shape);
        const int64_t n = int64_t(x.size());
        std::copy(x.data(), x.data() + n, out.mutable_data());
        uint64_t S;
        {
          py::gil_scoped_release nogil;
          S = exp_pass_array(out.mutable_data(), n, mx, thr, tail);
        }
        return py::make_tuple(out, S);
      },
      py::arg("x"), py::arg("m"), py::arg("thr"), py::arg("tail"),
      "The transform's exp pass (tests): (entries, S).  entries = x >= thr ? pexp(x - m) : 0; "
      "with tail=True, vectors without integer mass keep d = x - m (negative) instead");

  m.def(
      "materialize",
      [](FloatArray e, float cut, double sd) {
        check_isa_env();
        py::array_t<float> out(e.request().shape);
        const int64_t n = int64_t(e.size());
        std::copy(e.data(), e.data() + n, out.mutable_data());
        {
          py::gil_scoped_release nogil;
          materialize_array(out.mutable_data(), n, cut, sd);
        }
        return out;
      },
      py::arg("e"), py::arg("cut"), py::arg("sd"),
      "The transform's probability pass (tests): e >= cut ? flush(float32(float64(e) * 2^40 / "
      "sd)) : 0, at the active ISA level (a negative e stands for pexp(e), as in a row)");

  m.def(
      "tree_update",
      [](py::array_t<int64_t, py::array::c_style | py::array::forcecast> R, py::object Qw,
         double ia, double iq, int64_t y) {
        check_isa_env();
        const int64_t V = int64_t(R.size());
        py::array_t<int64_t> out(V);
        int64_t* r = out.mutable_data();
        std::copy(R.data(), R.data() + V, r);
        py::array_t<int64_t, py::array::c_style | py::array::forcecast> q;
        if (!Qw.is_none()) {
          q = Qw.cast<decltype(q)>();
          if (int64_t(q.size()) != V) fail("tree_update: Qw must have R's size");
        }
        // block sums of R (the kernel's invariant: a block with sum 0 is all 0, and skipped)
        py::array_t<uint64_t> bsum((V + kDrawBlock - 1) / kDrawBlock);
        uint64_t* bs = bsum.mutable_data();
        for (int64_t i = 0; i < bsum.size(); ++i) bs[i] = 0;
        for (int64_t i = 0; i < V; ++i) bs[i / kDrawBlock] += uint64_t(r[i]);
        const uint64_t total =
            passes().tree_update(r, Qw.is_none() ? nullptr : q.data(), ia, iq, y, V, bs);
        return py::make_tuple(out, bsum, total);
      },
      py::arg("R"), py::arg("Qw"), py::arg("ia"), py::arg("iq"), py::arg("y"),
      "The tree residual's update pass (tests), at the active ISA level: R' = max(trunc((R ia - "
      "(Qw iq, or 1 at y and 0 elsewhere when Qw is None)) 2^60), 0) in float64 (0 <= R < 2^61) "
      "-> (R', its block sums per kDrawBlock tokens, their total).");

  m.def(
      "block_mass",
      [](FloatArray p, py::object q, double rho) {
        check_isa_env();
        const int64_t V = int64_t(p.size());
        FloatArray qa;
        if (!q.is_none()) {
          qa = q.cast<FloatArray>();
          if (int64_t(qa.size()) != V) fail("block_mass: q must have p's size");
        }
        py::array_t<uint64_t> bsum((V + kDrawBlock - 1) / kDrawBlock);
        const uint64_t total = passes().block_mass(p.data(), q.is_none() ? nullptr : qa.data(),
                                                   rho, V, bsum.mutable_data());
        return py::make_tuple(bsum, total);
      },
      py::arg("p"), py::arg("q"), py::arg("rho"),
      "Block verification's residual mass (tests), at the active ISA level: the sums per "
      "kDrawBlock tokens of trunc(d 2^60), d = rho p - max(q, 0) where rho p > q else 0 in "
      "float64 (q None: 0), and their total.");
}

}  // namespace binding
}  // namespace specops
