// pybind11 bindings of the torch-free kernels.  A kernel entry (verify, verify_tree,
// sampling_probs) takes one dict of named fields, built by specops/backends/cpu.py (which keeps
// the tensors alive and does the torch side); a field that is missing, unknown or of the wrong
// kind is a ValueError naming it.  Tensors arrive as small tuples of integers:
//
//   matrix view  (address, dtype code, rows, cols, row stride)  or None (absent)
//   column view  (address, element stride, dtype code)          (stride 0: a broadcast value)
//                or, for the per-request parameters, a Python int / float: one value for every
//                request, stored in the call's own Scalars (the per-call cost of a scalar is
//                one conversion)
//   output       the address (int) of a tensor cpu.py allocated
//
// Every field is checked here, with the GIL held; the kernels then run with the GIL released
// and bounds-check every row index they derive from the data.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
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
void bind_coin_walk(py::module_& m);
void bind_probs_summary(py::module_& m);
void bind_shard_passes(py::module_& m);  // csrc/distributed/shard_binding.cpp
using specops::FloatCol;
using specops::IntCol;
using specops::Mat;

namespace {

// The call convention below (fields by name); specops/backends/cpu.py refuses a module built
// with another (an editable install whose C++ was not rebuilt).
constexpr int kBindingVersion = 2;

[[noreturn]] void fail(const std::string& msg) { throw std::invalid_argument("specops._C: " + msg); }

// One field's value and name (for the error messages).
struct Field {
  py::handle value;
  const char* name;
};

// The fields of one call, given as keyword arguments of a METH_FASTCALL function (no dict is
// built: the values arrive as an array, their names as a tuple, the same tuple object for every
// call from one call site).  Each key is interned once (SPECOPS_FIELD) and the fields are
// usually given in the order they are read, so a lookup is mostly one pointer compare.
class Fields {
 public:
  Fields(PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames, const char* call)
      : args_(args), names_(kwnames), n_(kwnames ? PyTuple_GET_SIZE(kwnames) : 0), call_(call) {
    if (nargs != 0)
      fail(call_ + ": takes its fields by name only, got " + std::to_string(nargs) +
           " positional argument(s)");
  }
  Field get(PyObject* key, const char* name) {
    const bool in_order = next_ < n_ && PyTuple_GET_ITEM(names_, next_) == key;
    const Py_ssize_t i = in_order ? next_ : find(key, name);
    next_ = i + 1;
    if (n_read_ < kMaxFields) read_[n_read_] = name;
    ++n_read_;
    return {args_[i], name};
  }
  // After the last get: every field given was read (none misspelt or unknown).
  void no_other_fields() const {
    if (n_ == Py_ssize_t(n_read_)) return;
    std::string unknown;
    for (Py_ssize_t i = 0; i < n_; ++i) {
      const char* k = PyUnicode_AsUTF8(PyTuple_GET_ITEM(names_, i));
      if (!k) throw py::error_already_set();
      if (std::none_of(read_, read_ + std::min(n_read_, kMaxFields),
                       [k](const char* r) { return std::strcmp(r, k) == 0; }))
        unknown += (unknown.empty() ? "'" : ", '") + std::string(k) + "'";
    }
    fail(call_ + ": unknown field " + unknown);
  }

 private:
  // The position of `key` among the names (a name that is not interned: by value).
  Py_ssize_t find(PyObject* key, const char* name) const {
    for (Py_ssize_t i = 0; i < n_; ++i)
      if (PyTuple_GET_ITEM(names_, i) == key) return i;
    for (Py_ssize_t i = 0; i < n_; ++i) {
      const int eq = PyUnicode_Compare(PyTuple_GET_ITEM(names_, i), key);
      if (eq == -1 && PyErr_Occurred()) throw py::error_already_set();
      if (eq == 0) return i;
    }
    fail(call_ + ": missing field '" + name + "'");
  }

  static constexpr size_t kMaxFields = 32;
  PyObject* const* args_;
  PyObject* names_;
  Py_ssize_t n_;
  std::string call_;
  Py_ssize_t next_ = 0;
  const char* read_[kMaxFields];
  size_t n_read_ = 0;
};

// The field `name` of `fields` (the key interned at its first use).
#define SPECOPS_FIELD(fields, name)                                          \
  (fields).get(                                                              \
      [] {                                                                   \
        static PyObject* const key = PyUnicode_InternFromString(#name);      \
        return key;                                                          \
      }(),                                                                   \
      #name)

// The integers of a tuple of exactly n Python ints.
template <size_t n>
std::array<long long, n> ints(Field f) {
  PyObject* o = f.value.ptr();
  if (!PyTuple_Check(o) || PyTuple_GET_SIZE(o) != Py_ssize_t(n))
    fail(std::string(f.name) + " must be a tuple of " + std::to_string(n) + " ints");
  std::array<long long, n> v{};
  for (size_t i = 0; i < n; ++i) {
    PyObject* x = PyTuple_GET_ITEM(o, Py_ssize_t(i));
    // addresses are unsigned; everything else fits a signed 64-bit integer
    v[i] = i == 0 ? (long long)PyLong_AsUnsignedLongLong(x) : PyLong_AsLongLong(x);
    if (PyErr_Occurred()) {
      PyErr_Clear();
      fail(std::string(f.name) + ": item " + std::to_string(i) + " is not a 64-bit int");
    }
  }
  return v;
}

// A Python int (not a bool) that fits int64.
int64_t integer(Field f) {
  PyObject* o = f.value.ptr();
  if (!PyLong_Check(o) || PyBool_Check(o)) fail(std::string(f.name) + " must be an int");
  const long long v = PyLong_AsLongLong(o);
  if (PyErr_Occurred()) {
    PyErr_Clear();
    fail(std::string(f.name) + ": the value does not fit int64");
  }
  return v;
}

int64_t count(Field f) {
  const int64_t v = integer(f);
  if (v < 0) fail(std::string(f.name) + " must be >= 0, got " + std::to_string(v));
  return v;
}

// How many threads a call may use (>= 1; the pool caps it, core/parallel.cpp).
int threads(Field f) {
  const int64_t v = integer(f);
  if (v < 1) fail(std::string(f.name) + " must be >= 1, got " + std::to_string(v));
  return int(std::min<int64_t>(v, 1 << 20));
}

bool flag(Field f) {
  if (!PyBool_Check(f.value.ptr())) fail(std::string(f.name) + " must be a bool");
  return f.value.ptr() == Py_True;
}

// An output's address (0 only where `optional` or nothing is written).
template <class T>
T* address(Field f, int64_t n, bool optional = false) {
  PyObject* o = f.value.ptr();
  const unsigned long long a = PyLong_Check(o) ? PyLong_AsUnsignedLongLong(o) : 0;
  if (!PyLong_Check(o) || PyErr_Occurred()) {
    PyErr_Clear();
    fail(std::string(f.name) + " must be an address (an int)");
  }
  if (!a && n > 0 && !optional) fail(std::string(f.name) + ": null address");
  return reinterpret_cast<T*>(uintptr_t(a));
}

Mat matrix(Field f, bool probs) {
  Mat m;
  if (f.value.is_none()) return m;
  const std::string what = f.name;
  const auto v = ints<5>(f);
  if (v[1] < specops::kF32 || v[1] > specops::kF16) fail(what + ": bad dtype code");
  if (probs && v[1] != specops::kF32) fail(what + ": probabilities must be float32");
  if (v[2] < 0 || v[3] < 0) fail(what + ": negative size");
  if (v[3] > specops::MAX_VOCAB) fail(what + ": V exceeds MAX_VOCAB = 2**22");
  m.ptr = reinterpret_cast<const void*>(uintptr_t(v[0]));
  m.dtype = int(v[1]);
  m.rows = m.ptr ? v[2] : 0;
  m.cols = v[3];
  m.stride = v[4];
  return m;
}

// A column of n values: a column view, None (absent) or, with a `slot`, a Python int stored
// there and read with stride 0.
IntCol int_column(Field f, int64_t n, int64_t* slot = nullptr) {
  IntCol c;
  if (f.value.is_none()) return c;
  PyObject* o = f.value.ptr();
  if (slot && PyLong_Check(o) && !PyBool_Check(o)) {
    *slot = integer(f);
    c.ptr = slot;
    c.stride = 0;
    return c;
  }
  const auto v = ints<3>(f);
  if (v[2] != specops::kI32 && v[2] != specops::kI64)
    fail(std::string(f.name) + ": must be int32 or int64");
  if (!v[0] && n > 0) fail(std::string(f.name) + ": null address");
  c.ptr = reinterpret_cast<const void*>(uintptr_t(v[0]));
  c.stride = v[1];
  c.is_i32 = v[2] == specops::kI32;
  return c;
}

// The same for float32 columns (a Python float: the caller rounded it to float32 already).
FloatCol float_column(Field f, int64_t n, float* slot = nullptr) {
  FloatCol c;
  if (slot && PyFloat_Check(f.value.ptr())) {
    *slot = float(PyFloat_AS_DOUBLE(f.value.ptr()));
    c.ptr = slot;
    c.stride = 0;
    return c;
  }
  const auto v = ints<3>(f);
  if (v[2] != specops::kF32) fail(std::string(f.name) + ": must be float32");
  if (!v[0] && n > 0) fail(std::string(f.name) + ": null address");
  c.ptr = reinterpret_cast<const float*>(uintptr_t(v[0]));
  c.stride = v[1];
  return c;
}

// A column every one of n > 0 requests needs.
IntCol required(IntCol c, const char* name, int64_t n) {
  if (n > 0 && !c.ptr) fail(std::string(name) + ": missing (None)");
  return c;
}

// The per-request parameters given as Python numbers: stored here for the call (the columns
// point into it with stride 0).
struct Scalars {
  float inv_temp = 0.0f;
  float top_p = 0.0f;
  float min_p = 0.0f;
  int64_t top_k = 0;
  int64_t seed = 0;
  int64_t offset = 0;
  int64_t num_nodes = 0;
};

// The transform's parameters of n requests (or rows).
specops::TransformParams transform_params(Fields& f, int64_t n, Scalars& s) {
  specops::TransformParams p;
  p.inv_temp = float_column(SPECOPS_FIELD(f, inv_temp), n, &s.inv_temp);
  p.top_k = required(int_column(SPECOPS_FIELD(f, top_k), n, &s.top_k), "top_k", n);
  p.top_p = float_column(SPECOPS_FIELD(f, top_p), n, &s.top_p);
  p.min_p = float_column(SPECOPS_FIELD(f, min_p), n, &s.min_p);
  return p;
}

// An entry point that takes its fields by keyword, run as a METH_FASTCALL | METH_KEYWORDS
// function (pybind11's dispatcher would build a dict of the keywords first: ~2 us a call,
// against ~0.1 us here): parse reads the kernel's arguments (the per-request numbers into
// `sc`, alive for the call), then `threads`, then the kernel runs with the GIL released.  C++
// exceptions become Python ones as pybind11 would make them (invalid_argument: ValueError).
template <class Args, Args (*parse)(Fields&, Scalars&), void (*run)(const Args&),
          const char* name>
PyObject* keyword_entry(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs,
                        PyObject* kwnames) {
  try {
    specops::check_isa_env();
    Fields f(args, nargs, kwnames, name);
    Scalars sc;
    Args a = parse(f, sc);
    a.threads = threads(SPECOPS_FIELD(f, threads));
    f.no_other_fields();
    {
      py::gil_scoped_release nogil;
      run(a);
    }
    Py_RETURN_NONE;
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (const std::invalid_argument& e) {
    PyErr_SetString(PyExc_ValueError, e.what());
  } catch (const std::bad_alloc&) {
    PyErr_NoMemory();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
  return nullptr;
}

template <class Args, Args (*parse)(Fields&, Scalars&), void (*run)(const Args&),
          const char* name>
PyMethodDef keyword_method(const char* doc) {
  return {name,
          reinterpret_cast<PyCFunction>(
              reinterpret_cast<void (*)()>(&keyword_entry<Args, parse, run, name>)),
          METH_FASTCALL | METH_KEYWORDS, doc};
}

constexpr char kVerify[] = "verify";
constexpr char kVerifyTree[] = "verify_tree";
constexpr char kVerifyTraversal[] = "verify_traversal";
constexpr char kVerifyGbv[] = "verify_gbv";
constexpr char kSamplingProbs[] = "sampling_probs";

// The fields verify and verify_tree (VerifyArgs, TreeArgs) share: the batch size, then the
// target and draft matrices.
template <class A>
void read_batch(Fields& f, A& a) {
  a.B = count(SPECOPS_FIELD(f, B));
  a.target_is_probs = flag(SPECOPS_FIELD(f, target_is_probs));
  a.target = matrix(SPECOPS_FIELD(f, target), a.target_is_probs);
  a.draft_is_probs = flag(SPECOPS_FIELD(f, draft_is_probs));
  a.draft = matrix(SPECOPS_FIELD(f, draft), a.draft_is_probs);
}

constexpr char kVerifyDoc[] = R"(The fused verify walk (reference.verify_rows_ref).  fields, by
name: target, draft (matrix views; draft None: point-mass drafts), target_is_probs,
draft_is_probs (bool); draft_ids (column view) and num_ids; per request: target_row_start,
draft_row_start, num_draft, inv_temp, top_k, top_p, min_p, seed, offset (column views; the last
six may be a Python float / int shared by every request), forced_num_accepted (column view or
None); B, max_k; block (bool: block verification, section 9); outputs (addresses): out_tokens
[B, max_k + 1] int32, out_num_accepted [B] int32, out_valid [B] bool, out_rates [B, max_k]
float32 (section 10) or 0; threads: requests run on at most this many threads.)";
specops::VerifyArgs parse_verify(Fields& f, Scalars& sc) {
  specops::VerifyArgs a;
  read_batch(f, a);
  a.max_k = count(SPECOPS_FIELD(f, max_k));
  const int64_t B = a.B;
  const int64_t num_ids = count(SPECOPS_FIELD(f, num_ids));
  a.draft_ids = int_column(SPECOPS_FIELD(f, draft_ids), num_ids);
  a.num_ids = a.draft_ids.ptr ? num_ids : 0;
  a.target_row_start =
      required(int_column(SPECOPS_FIELD(f, target_row_start), B), "target_row_start", B);
  a.draft_row_start =
      required(int_column(SPECOPS_FIELD(f, draft_row_start), B), "draft_row_start", B);
  a.num_draft = required(int_column(SPECOPS_FIELD(f, num_draft), B), "num_draft", B);
  a.params = transform_params(f, B, sc);
  a.seed = required(int_column(SPECOPS_FIELD(f, seed), B, &sc.seed), "seed", B);
  a.offset = required(int_column(SPECOPS_FIELD(f, offset), B, &sc.offset), "offset", B);
  a.forced_num_accepted = int_column(SPECOPS_FIELD(f, forced_num_accepted), B);
  a.block = flag(SPECOPS_FIELD(f, block));
  if (a.block && a.forced_num_accepted.ptr) fail("verify: the forced mode is token-wise only");
  a.out_tokens = address<int32_t>(SPECOPS_FIELD(f, out_tokens), B);
  a.out_num_accepted = address<int32_t>(SPECOPS_FIELD(f, out_num_accepted), B);
  a.out_valid = address<uint8_t>(SPECOPS_FIELD(f, out_valid), B);
  a.out_rates = address<float>(SPECOPS_FIELD(f, out_rates), B * a.max_k, true);
  return a;
}

constexpr char kVerifyTreeDoc[] = R"(Tree verification (reference.verify_tree_ref, section 11).
fields, by name: target, draft (matrix views [B * N, V]; draft None: point-mass drafts),
target_is_probs, draft_is_probs (bool); node_ids, parents (column views of B * N entries, node n
of request b at b * N + n); per request: num_nodes, inv_temp, top_k, top_p, min_p, seed, offset
(column views, or a Python number shared by every request); B, N, max_depth; mss (bool: method
'mss', else 'rsd'); outputs (addresses): out_tokens [B, max_depth + 1] int32, out_num_accepted
[B] int32, out_nodes [B, max_depth] int32, out_valid [B] bool; threads: requests run on at most
this many threads.)";
specops::TreeArgs parse_verify_tree(Fields& f, Scalars& sc) {
  specops::TreeArgs a;
  read_batch(f, a);
  a.N = count(SPECOPS_FIELD(f, N));
  a.max_depth = count(SPECOPS_FIELD(f, max_depth));
  const int64_t B = a.B, BN = a.B * a.N;
  // node n of request b is row b * N + n: the kernel indexes the matrices by that alone
  if (BN > 0 && (!a.target.ptr || a.target.rows != BN))
    fail("verify_tree: target must have B * N rows");
  if (a.draft.ptr && (a.draft.rows != BN || a.draft.cols != a.target.cols))
    fail("verify_tree: draft must have the target's shape [B * N, V]");
  a.node_ids = required(int_column(SPECOPS_FIELD(f, node_ids), BN), "node_ids", BN);
  a.parents = required(int_column(SPECOPS_FIELD(f, parents), BN), "parents", BN);
  a.num_nodes =
      required(int_column(SPECOPS_FIELD(f, num_nodes), B, &sc.num_nodes), "num_nodes", B);
  a.params = transform_params(f, B, sc);
  a.seed = required(int_column(SPECOPS_FIELD(f, seed), B, &sc.seed), "seed", B);
  a.offset = required(int_column(SPECOPS_FIELD(f, offset), B, &sc.offset), "offset", B);
  a.rsd = !flag(SPECOPS_FIELD(f, mss));
  a.out_tokens = address<int32_t>(SPECOPS_FIELD(f, out_tokens), B);
  a.out_num_accepted = address<int32_t>(SPECOPS_FIELD(f, out_num_accepted), B);
  a.out_nodes = address<int32_t>(SPECOPS_FIELD(f, out_nodes), B * a.max_depth);
  a.out_valid = address<uint8_t>(SPECOPS_FIELD(f, out_valid), B);
  return a;
}

constexpr char kVerifyTraversalDoc[] = R"(Traversal verification (reference.verify_traversal_ref,
section 14): verify_tree's fields; mss (bool): siblings drawn i.i.d. (method 'traversal_iid'),
else without replacement ('traversal').)";

constexpr char kSamplingProbsDoc[] = R"(fields, by name: logits (matrix view [N, V]); inv_temp,
top_k, top_p, min_p (column views of N rows, or a Python number shared by every row); outputs
(addresses): out_probs [N, V] float32 (contiguous), out_valid [N] bool; threads: rows run on at
most this many threads.)";
// sampling_probs' arguments (kernels.h takes them one by one).
struct SamplingArgs {
  Mat logits;
  specops::TransformParams params;
  float* out_probs = nullptr;
  uint8_t* out_valid = nullptr;
  int threads = 1;
};

SamplingArgs parse_sampling_probs(Fields& f, Scalars& sc) {
  SamplingArgs a;
  a.logits = matrix(SPECOPS_FIELD(f, logits), false);
  a.params = transform_params(f, a.logits.rows, sc);
  a.out_probs = address<float>(SPECOPS_FIELD(f, out_probs), a.logits.rows * a.logits.cols);
  a.out_valid = address<uint8_t>(SPECOPS_FIELD(f, out_valid), a.logits.rows);
  return a;
}

void run_sampling_probs(const SamplingArgs& a) {
  specops::sampling_probs(a.logits, a.params, a.out_probs, a.out_valid, a.threads);
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
  m.attr("BINDING_VERSION") = kBindingVersion;

  // the kernel entries take their fields by keyword (see keyword_entry)
  // the kernel entries take their fields by keyword (see keyword_entry)
  static PyMethodDef entries[] = {
      keyword_method<specops::VerifyArgs, parse_verify, specops::verify, kVerify>(kVerifyDoc),
      keyword_method<specops::TreeArgs, parse_verify_tree, specops::verify_tree, kVerifyTree>(
          kVerifyTreeDoc),
      keyword_method<specops::TreeArgs, parse_verify_tree, specops::verify_traversal,
                     kVerifyTraversal>(kVerifyTraversalDoc),
      keyword_method<specops::TreeArgs, parse_verify_tree, specops::verify_gbv, kVerifyGbv>(
          "GBV (reference.verify_gbv_ref, section 15): verify_tree's fields (mss unused)."),
      keyword_method<SamplingArgs, parse_sampling_probs, run_sampling_probs, kSamplingProbs>(
          kSamplingProbsDoc),
  };
  for (PyMethodDef& def : entries) {
    PyObject* fn = PyCFunction_NewEx(&def, nullptr, m.attr("__name__").ptr());
    if (!fn) throw py::error_already_set();
    m.add_object(def.ml_name, py::reinterpret_steal<py::object>(fn));
  }

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

  m.def(
      "tree_update",
      [](py::array_t<int64_t, py::array::c_style | py::array::forcecast> R, py::object Qw,
         double ia, double iq, int64_t y) {
        specops::check_isa_env();
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
        py::array_t<uint64_t> bsum((V + specops::kDrawBlock - 1) / specops::kDrawBlock);
        uint64_t* bs = bsum.mutable_data();
        for (int64_t i = 0; i < bsum.size(); ++i) bs[i] = 0;
        for (int64_t i = 0; i < V; ++i) bs[i / specops::kDrawBlock] += uint64_t(r[i]);
        const uint64_t total =
            specops::passes().tree_update(r, Qw.is_none() ? nullptr : q.data(), ia, iq, y, V, bs);
        return py::make_tuple(out, bsum, total);
      },
      py::arg("R"), py::arg("Qw"), py::arg("ia"), py::arg("iq"), py::arg("y"),
      "The tree residual's update pass (tests), at the active ISA level: R' = max(trunc((R ia - "
      "(Qw iq, or 1 at y and 0 elsewhere when Qw is None)) 2^60), 0) in float64 (0 <= R < 2^61) "
      "-> (R', its block sums per kDrawBlock tokens, their total).");

  m.def(
      "block_mass",
      [](py::array_t<float, py::array::c_style | py::array::forcecast> p, py::object q,
         double rho) {
        specops::check_isa_env();
        const int64_t V = int64_t(p.size());
        py::array_t<float, py::array::c_style | py::array::forcecast> qa;
        if (!q.is_none()) {
          qa = q.cast<decltype(qa)>();
          if (int64_t(qa.size()) != V) fail("block_mass: q must have p's size");
        }
        py::array_t<uint64_t> bsum((V + specops::kDrawBlock - 1) / specops::kDrawBlock);
        const uint64_t total = specops::passes().block_mass(
            p.data(), q.is_none() ? nullptr : qa.data(), rho, V, bsum.mutable_data());
        return py::make_tuple(bsum, total);
      },
      py::arg("p"), py::arg("q"), py::arg("rho"),
      "Block verification's residual mass (tests), at the active ISA level: the sums per "
      "kDrawBlock tokens of trunc(d 2^60), d = rho p - max(q, 0) where rho p > q else 0 in "
      "float64 (q None: 0), and their total.");

  bind_coin_walk(m);       // csrc/verify/coins_binding.cpp
  bind_probs_summary(m);   // csrc/verify/probs_check_binding.cpp
  bind_shard_passes(m);    // csrc/distributed/shard_binding.cpp

  m.def("isa", &specops::isa,
        "The active ISA level: 'scalar', 'sse2', 'avx2' or 'avx512'.  Raises ValueError when "
        "SPECOPS_CPU_ISA asks for a level that is unknown or cannot run here.");
  m.def("set_isa", &specops::set_isa, py::arg("level"),
        "Switch the ISA level in-process (tests); ValueError for a level that cannot run here.");
  m.def("available_isas", &specops::available_isas,
        "The levels this build contains and this CPU runs, lowest first.");
  m.def("constants", &constants, "The constants of the spec as compiled (see specops.reference).");
}
