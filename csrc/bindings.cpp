// pybind11 bindings of the torch-free kernels.  Tensors arrive as small tuples of integers
// (built by specops/backends/cpu.py, which keeps the tensors alive and does the torch side):
//
//   matrix view  (address, dtype code, rows, cols, row stride)  or None (absent)
//   column view  (address, element stride, dtype code)          (stride 0: a broadcast value)
//                or a Python int / float: one value for every request, stored in the call's
//                own scalar slots (the per-call cost of a scalar is one conversion)
//
// Every view is checked here, with the GIL held (errors are ValueError); the kernels then
// run with the GIL released and bounds-check every row index they derive from the data.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <iterator>
#include <stdexcept>
#include <string>
#include <tuple>

#include "core/float_bits.h"
#include "core/pexp.h"
#include "core/philox.h"
#include "kernels.h"
#include "simd/passes.h"

namespace py = pybind11;
using specops::FloatCol;
using specops::IntCol;
using specops::Mat;

namespace {

[[noreturn]] void fail(const std::string& msg) { throw std::invalid_argument("specops._C: " + msg); }

// The integers of a tuple of exactly n Python ints.
template <size_t n>
std::array<long long, n> ints(py::handle t, const char* what) {
  PyObject* o = t.ptr();
  if (!PyTuple_Check(o) || PyTuple_GET_SIZE(o) != Py_ssize_t(n))
    fail(std::string(what) + " must be a tuple of " + std::to_string(n) + " ints");
  std::array<long long, n> v{};
  for (size_t i = 0; i < n; ++i) {
    PyObject* x = PyTuple_GET_ITEM(o, Py_ssize_t(i));
    // addresses are unsigned; everything else fits a signed 64-bit integer
    v[i] = i == 0 ? (long long)PyLong_AsUnsignedLongLong(x) : PyLong_AsLongLong(x);
    if (PyErr_Occurred()) {
      PyErr_Clear();
      fail(std::string(what) + ": item " + std::to_string(i) + " is not a 64-bit int");
    }
  }
  return v;
}

Mat matrix(py::handle t, const char* what, bool probs) {
  Mat m;
  if (t.is_none()) return m;
  const auto v = ints<5>(t, what);
  if (v[1] < specops::kF32 || v[1] > specops::kF16) fail(std::string(what) + ": bad dtype code");
  if (probs && v[1] != specops::kF32) fail(std::string(what) + ": probabilities must be float32");
  if (v[2] < 0 || v[3] < 0) fail(std::string(what) + ": negative size");
  if (v[3] > specops::MAX_VOCAB) fail(std::string(what) + ": V exceeds MAX_VOCAB = 2**22");
  m.ptr = reinterpret_cast<const void*>(uintptr_t(v[0]));
  m.dtype = int(v[1]);
  m.rows = m.ptr ? v[2] : 0;
  m.cols = v[3];
  m.stride = v[4];
  return m;
}

// A Python number for a column: stored in `slot` (alive for the call), read with stride 0.
bool scalar_slot(py::handle t, const char* what, int64_t* slot) {
  PyObject* o = t.ptr();
  if (!PyLong_Check(o) || PyBool_Check(o)) return false;
  *slot = PyLong_AsLongLong(o);
  if (PyErr_Occurred()) {
    PyErr_Clear();
    fail(std::string(what) + ": the value does not fit int64");
  }
  return true;
}

IntCol int_column(py::handle t, const char* what, int64_t n, int64_t* slot = nullptr) {
  IntCol c;
  if (t.is_none()) return c;
  if (slot && scalar_slot(t, what, slot)) {
    c.ptr = slot;
    c.stride = 0;
    return c;
  }
  const auto v = ints<3>(t, what);
  if (v[2] != specops::kI32 && v[2] != specops::kI64) fail(std::string(what) + ": must be int32 or int64");
  if (!v[0] && n > 0) fail(std::string(what) + ": null address");
  c.ptr = reinterpret_cast<const void*>(uintptr_t(v[0]));
  c.stride = v[1];
  c.is_i32 = v[2] == specops::kI32;
  return c;
}

FloatCol float_column(py::handle t, const char* what, int64_t n, float* slot = nullptr) {
  if (slot && PyFloat_Check(t.ptr())) {  // the caller rounded it to float32 already
    *slot = float(PyFloat_AS_DOUBLE(t.ptr()));
    FloatCol c;
    c.ptr = slot;
    c.stride = 0;
    return c;
  }
  const auto v = ints<3>(t, what);
  if (v[2] != specops::kF32) fail(std::string(what) + ": must be float32");
  if (!v[0] && n > 0) fail(std::string(what) + ": null address");
  FloatCol c;
  c.ptr = reinterpret_cast<const float*>(uintptr_t(v[0]));
  c.stride = v[1];
  return c;
}

// The per-request (or per-row) columns, in this order.
constexpr const char* kRequestFields[] = {
    "target_row_start", "draft_row_start", "num_draft", "inv_temp", "top_k", "top_p",
    "min_p",            "seed",            "offset",    "forced_num_accepted"};
constexpr const char* kRowFields[] = {"inv_temp", "top_k", "top_p", "min_p"};
// The per-request parameter columns of verify_tree, in this order.
constexpr const char* kTreeFields[] = {"inv_temp", "top_k", "top_p", "min_p", "seed", "offset"};

py::handle item(py::tuple t, size_t i) { return PyTuple_GET_ITEM(t.ptr(), Py_ssize_t(i)); }

void check_len(py::tuple t, size_t n, const char* what) {
  if (t.size() != n) fail(std::string(what) + " must be a tuple of " + std::to_string(n) + " columns");
}

// Storage for the columns given as Python numbers, alive for one call.
struct Scalars {
  int64_t i[std::size(kRequestFields)] = {};
  float f[std::size(kRowFields)] = {};
};

specops::TransformParams transform_params(py::tuple cols, size_t at, int64_t n, Scalars& s) {
  specops::TransformParams p;
  p.inv_temp = float_column(item(cols, at), "inv_temp", n, &s.f[0]);
  p.top_k = int_column(item(cols, at + 1), "top_k", n, &s.i[at + 1]);
  p.top_p = float_column(item(cols, at + 2), "top_p", n, &s.f[2]);
  p.min_p = float_column(item(cols, at + 3), "min_p", n, &s.f[3]);
  if (n > 0 && !p.top_k.ptr) fail("top_k: missing");
  return p;
}

template <class T>
T* out_ptr(uintptr_t a, int64_t n, const char* what) {
  if (!a && n > 0) fail(std::string(what) + ": null address");
  return reinterpret_cast<T*>(a);
}

py::dict constants() {
  py::dict d;
#define SPECOPS_CONSTANT(name) d[#name] = specops::name
  SPECOPS_CONSTANT(PHILOX_M0);
  SPECOPS_CONSTANT(PHILOX_M1);
  SPECOPS_CONSTANT(PHILOX_W0);
  SPECOPS_CONSTANT(PHILOX_W1);
  SPECOPS_CONSTANT(PHILOX_ROUNDS);
  SPECOPS_CONSTANT(TAG_ACCEPT);
  SPECOPS_CONSTANT(TAG_SAMPLE);
  SPECOPS_CONSTANT(EXP_CUTOFF);
  SPECOPS_CONSTANT(EXP_ZERO_MASS);
  SPECOPS_CONSTANT(EXP_LOG2E);
  SPECOPS_CONSTANT(EXP_ROUND);
  SPECOPS_CONSTANT(EXP_LN2_HI);
  SPECOPS_CONSTANT(EXP_LN2_LO);
  SPECOPS_CONSTANT(E_SCALE_BITS);
  SPECOPS_CONSTANT(W_SCALE_BITS);
  SPECOPS_CONSTANT(P_CHECK_BITS);
  SPECOPS_CONSTANT(MAX_VOCAB);
#undef SPECOPS_CONSTANT
  d["FLT_MIN"] = specops::FLT_MIN_F32;
  py::tuple coeffs(std::size(specops::EXP_COEFFS));
  for (size_t i = 0; i < coeffs.size(); ++i) coeffs[i] = py::float_(specops::EXP_COEFFS[i]);
  d["EXP_COEFFS"] = coeffs;
  return d;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "specops CPU kernels (torch-free C++; see specops/reference.py for the spec)";

  py::tuple fields(std::size(kRequestFields));
  for (size_t i = 0; i < std::size(kRequestFields); ++i) fields[i] = kRequestFields[i];
  m.attr("REQUEST_FIELDS") = fields;
  py::tuple row_fields(std::size(kRowFields));
  for (size_t i = 0; i < std::size(kRowFields); ++i) row_fields[i] = kRowFields[i];
  m.attr("ROW_FIELDS") = row_fields;
  py::tuple tree_fields(std::size(kTreeFields));
  for (size_t i = 0; i < std::size(kTreeFields); ++i) tree_fields[i] = kTreeFields[i];
  m.attr("TREE_FIELDS") = tree_fields;

  m.def(
      "verify",
      [](py::handle target, bool target_is_probs, py::handle draft, bool draft_is_probs,
         py::handle draft_ids, int64_t num_ids, py::tuple requests, int64_t B, int64_t max_k,
         uintptr_t out_tokens, uintptr_t out_num_accepted, uintptr_t out_valid, bool block,
         uintptr_t out_rates) {
        specops::check_isa_env();
        if (B < 0 || max_k < 0 || num_ids < 0) fail("verify: B, max_k, num_ids must be >= 0");
        check_len(requests, std::size(kRequestFields), "verify: requests");
        specops::VerifyArgs a;
        Scalars sc;
        a.target = matrix(target, "target", target_is_probs);
        a.target_is_probs = target_is_probs;
        a.draft = matrix(draft, "draft", draft_is_probs);
        a.draft_is_probs = draft_is_probs;
        a.draft_ids = int_column(draft_ids, "draft_ids", num_ids);
        a.num_ids = a.draft_ids.ptr ? num_ids : 0;
        a.target_row_start = int_column(item(requests, 0), kRequestFields[0], B);
        a.draft_row_start = int_column(item(requests, 1), kRequestFields[1], B);
        a.num_draft = int_column(item(requests, 2), kRequestFields[2], B);
        a.params = transform_params(requests, 3, B, sc);
        a.seed = int_column(item(requests, 7), kRequestFields[7], B, &sc.i[7]);
        a.offset = int_column(item(requests, 8), kRequestFields[8], B, &sc.i[8]);
        a.forced_num_accepted = int_column(item(requests, 9), kRequestFields[9], B);
        if (B > 0 && (!a.target_row_start.ptr || !a.draft_row_start.ptr || !a.num_draft.ptr ||
                      !a.seed.ptr || !a.offset.ptr))
          fail("verify: a per-request column is missing");
        a.B = B;
        a.max_k = max_k;
        a.out_tokens = out_ptr<int32_t>(out_tokens, B, "out_tokens");
        a.out_num_accepted = out_ptr<int32_t>(out_num_accepted, B, "out_num_accepted");
        a.out_valid = out_ptr<uint8_t>(out_valid, B, "out_valid");
        a.block = block;
        if (block && a.forced_num_accepted.ptr) fail("verify: the forced mode is token-wise only");
        a.out_rates = out_rates ? out_ptr<float>(out_rates, B * max_k, "out_rates") : nullptr;
        py::gil_scoped_release nogil;
        specops::verify(a);
      },
      py::arg("target"), py::arg("target_is_probs"), py::arg("draft"), py::arg("draft_is_probs"),
      py::arg("draft_ids"), py::arg("num_ids"), py::arg("requests"), py::arg("B"),
      py::arg("max_k"), py::arg("out_tokens"), py::arg("out_num_accepted"),
      py::arg("out_valid"), py::arg("block") = false, py::arg("out_rates") = uintptr_t(0),
      "The fused verify walk (reference.verify_rows_ref).  target / draft: matrix views; "
      "draft_ids: a column view; requests: one column view per name in REQUEST_FIELDS "
      "(forced_num_accepted may be None; inv_temp, top_k, top_p, min_p, seed and offset may "
      "be a Python float / int shared by every request); outputs: addresses of token_ids [B, max_k + 1] "
      "int32, num_accepted [B] int32, valid [B] bool; block: block verification (section 9); "
      "out_rates: address of accept_rates [B, max_k] float32 (section 10) or 0.");

  m.def(
      "verify_tree",
      [](py::handle target, bool target_is_probs, py::handle draft, bool draft_is_probs,
         py::handle node_ids, py::handle parents, py::handle num_nodes, py::tuple requests,
         int64_t B, int64_t N, int64_t max_depth, bool mss, uintptr_t out_tokens,
         uintptr_t out_num_accepted, uintptr_t out_nodes, uintptr_t out_valid) {
        specops::check_isa_env();
        if (B < 0 || N < 0 || max_depth < 0) fail("verify_tree: B, N, max_depth must be >= 0");
        check_len(requests, std::size(kTreeFields), "verify_tree: requests");
        specops::TreeArgs a;
        Scalars sc;
        a.target = matrix(target, "target", target_is_probs);
        a.target_is_probs = target_is_probs;
        a.draft = matrix(draft, "draft", draft_is_probs);
        a.draft_is_probs = draft_is_probs;
        // node n of request b is row b * N + n: the kernel indexes the matrices by that alone
        if (B * N > 0 && (!a.target.ptr || a.target.rows != B * N))
          fail("verify_tree: target must have B * N rows");
        if (a.draft.ptr && (a.draft.rows != B * N || a.draft.cols != a.target.cols))
          fail("verify_tree: draft must have the target's shape [B * N, V]");
        a.node_ids = int_column(node_ids, "node_ids", B * N);
        a.parents = int_column(parents, "parents", B * N);
        a.num_nodes = int_column(num_nodes, "num_nodes", B, &sc.i[6]);  // a slot no field uses
        a.params = transform_params(requests, 0, B, sc);
        a.seed = int_column(item(requests, 4), kTreeFields[4], B, &sc.i[4]);
        a.offset = int_column(item(requests, 5), kTreeFields[5], B, &sc.i[5]);
        if (B > 0 && (!a.num_nodes.ptr || !a.seed.ptr || !a.offset.ptr))
          fail("verify_tree: a per-request column is missing");
        if (B * N > 0 && (!a.node_ids.ptr || !a.parents.ptr))
          fail("verify_tree: node_ids and parents are required");
        a.rsd = !mss;
        a.B = B;
        a.N = N;
        a.max_depth = max_depth;
        a.out_tokens = out_ptr<int32_t>(out_tokens, B, "out_tokens");
        a.out_num_accepted = out_ptr<int32_t>(out_num_accepted, B, "out_num_accepted");
        a.out_nodes = out_ptr<int32_t>(out_nodes, B * max_depth, "out_nodes");
        a.out_valid = out_ptr<uint8_t>(out_valid, B, "out_valid");
        py::gil_scoped_release nogil;
        specops::verify_tree(a);
      },
      py::arg("target"), py::arg("target_is_probs"), py::arg("draft"), py::arg("draft_is_probs"),
      py::arg("node_ids"), py::arg("parents"), py::arg("num_nodes"), py::arg("requests"),
      py::arg("B"), py::arg("N"), py::arg("max_depth"), py::arg("mss"), py::arg("out_tokens"),
      py::arg("out_num_accepted"), py::arg("out_nodes"), py::arg("out_valid"),
      "Tree verification (reference.verify_tree_ref, section 11).  target / draft: matrix "
      "views [B * N, V] (draft None: point-mass drafts); node_ids, parents: column views of "
      "B * N entries (node n of request b at b * N + n); num_nodes: a column view [B]; "
      "requests: one column view per name in TREE_FIELDS (each may be a Python number shared "
      "by every request); mss: method 'mss' (else 'rsd'); outputs: addresses of token_ids "
      "[B, max_depth + 1] int32, num_accepted [B] int32, accepted_nodes [B, max_depth] int32, "
      "valid [B] bool.");

  m.def(
      "sampling_probs",
      [](py::handle logits, py::tuple rows, uintptr_t out_probs, uintptr_t out_valid) {
        specops::check_isa_env();
        check_len(rows, std::size(kRowFields), "sampling_probs: rows");
        const Mat lg = matrix(logits, "logits", false);
        Scalars sc;
        const specops::TransformParams p = transform_params(rows, 0, lg.rows, sc);
        float* probs = out_ptr<float>(out_probs, lg.rows * lg.cols, "out_probs");
        uint8_t* valid = out_ptr<uint8_t>(out_valid, lg.rows, "out_valid");
        py::gil_scoped_release nogil;
        specops::sampling_probs(lg, p, probs, valid);
      },
      py::arg("logits"), py::arg("rows"), py::arg("out_probs"), py::arg("out_valid"),
      "logits matrix view [N, V] + one column view per name in ROW_FIELDS -> probabilities "
      "into out_probs [N, V] float32 (contiguous) and validity into out_valid [N] bool.");

  m.def(
      "philox",
      [](uint64_t c0, uint64_t c1, uint64_t c2, uint64_t c3, uint64_t k0, uint64_t k1) {
        const specops::Philox4 w = specops::philox4x32(uint32_t(c0), uint32_t(c1), uint32_t(c2),
                                                       uint32_t(c3), uint32_t(k0), uint32_t(k1));
        return std::make_tuple(w.w[0], w.w[1], w.w[2], w.w[3]);
      },
      "Philox4x32-10 of one counter/key (uint32 words) -> (w0, w1, w2, w3)");

  m.def(
      "pexp",
      [](py::array_t<float, py::array::c_style | py::array::forcecast> x) {
        specops::check_isa_env();
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
      "The portable float32 exp (reference.pexp) over an array, at the active ISA level");

  m.def(
      "exp_pass",
      [](py::array_t<float, py::array::c_style | py::array::forcecast> x, float m, float thr,
         bool tail) {
        specops::check_isa_env();
        py::array_t<float> out(x.request().shape);
        const int64_t n = int64_t(x.size());
        std::copy(x.data(), x.data() + n, out.mutable_data());
        uint64_t S;
        {
          py::gil_scoped_release nogil;
          S = specops::exp_pass_array(out.mutable_data(), n, m, thr, tail);
        }
        return py::make_tuple(out, S);
      },
      py::arg("x"), py::arg("m"), py::arg("thr"), py::arg("tail"),
      "The transform's exp pass (tests): (entries, S).  entries = x >= thr ? pexp(x - m) : 0; "
      "with tail=True, vectors without integer mass keep d = x - m (negative) instead");

  m.def(
      "materialize",
      [](py::array_t<float, py::array::c_style | py::array::forcecast> e, float cut, double sd) {
        specops::check_isa_env();
        py::array_t<float> out(e.request().shape);
        const int64_t n = int64_t(e.size());
        std::copy(e.data(), e.data() + n, out.mutable_data());
        {
          py::gil_scoped_release nogil;
          specops::materialize_array(out.mutable_data(), n, cut, sd);
        }
        return out;
      },
      py::arg("e"), py::arg("cut"), py::arg("sd"),
      "The transform's probability pass (tests): e >= cut ? flush(float32(float64(e) * 2^40 / "
      "sd)) : 0, at the active ISA level (a negative e stands for pexp(e), as in a row)");

  m.def("isa", &specops::isa,
        "The active ISA level: 'scalar', 'sse2', 'avx2' or 'avx512'.  Raises ValueError when "
        "SPECOPS_CPU_ISA asks for a level that is unknown or cannot run here.");
  m.def("set_isa", &specops::set_isa, py::arg("level"),
        "Switch the ISA level in-process (tests); ValueError for a level that cannot run here.");
  m.def("available_isas", &specops::available_isas,
        "The levels this build contains and this CPU runs, lowest first.");
  m.def("constants", &constants, "The constants of the spec as compiled (see specops.reference).");

#ifdef _OPENMP
  m.attr("has_openmp") = true;
#else
  m.attr("has_openmp") = false;
#endif
}
