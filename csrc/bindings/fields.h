// The one call convention of specops._C's kernel entries: every entry is a METH_FASTCALL
// function that takes its fields by name only (keyword arguments; a positional argument, a
// missing, unknown or misspelt field, or a value of the wrong kind is a ValueError naming it).
// The Python side (specops/backends/cpu.py, cpu_shard.py) keeps the tensors alive and does the
// torch work; the values arrive as
//
//   matrix view  (address, dtype code, rows, cols, row stride)  or None (absent)
//   column view  (address, element stride, dtype code)          (stride 0: a broadcast value)
//                or, for the per-request parameters, a Python int / float: one value for every
//                request, stored in the call's own Scalars (the per-call cost of a scalar is
//                one conversion)
//   address      an int: a buffer the caller allocated and checked (outputs, and the shard
//                passes' inputs)
//   int / float / bool  sizes, flags and parameters
//
// Every field is checked with the GIL held; the kernel then runs with the GIL released.
// Included by the binding units of csrc/bindings/ only.
#pragma once
#include <Python.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "core/float_bits.h"
#include "kernels.h"
#include "simd/passes.h"

namespace specops {
namespace binding {

namespace py = pybind11;

[[noreturn]] inline void fail(const std::string& msg) {
  throw std::invalid_argument("specops._C: " + msg);
}

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
      fail(std::string(call_) + ": takes its fields by name only, got " +
           std::to_string(nargs) + " positional argument(s)");
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
    fail(std::string(call_) + ": unknown field " + unknown);
  }
  const char* call() const { return call_; }

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
    fail(std::string(call_) + ": missing field '" + name + "'");
  }

  static constexpr size_t kMaxFields = 32;
  PyObject* const* args_;
  PyObject* names_;
  Py_ssize_t n_;
  const char* call_;
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
inline int64_t integer(Field f) {
  PyObject* o = f.value.ptr();
  if (!PyLong_Check(o) || PyBool_Check(o)) fail(std::string(f.name) + " must be an int");
  const long long v = PyLong_AsLongLong(o);
  if (PyErr_Occurred()) {
    PyErr_Clear();
    fail(std::string(f.name) + ": the value does not fit int64");
  }
  return v;
}

inline int64_t count(Field f) {
  const int64_t v = integer(f);
  if (v < 0) fail(std::string(f.name) + " must be >= 0, got " + std::to_string(v));
  return v;
}

// A Python float or int (not a bool), as a double.
inline double real(Field f) {
  PyObject* o = f.value.ptr();
  if (PyFloat_Check(o)) return PyFloat_AS_DOUBLE(o);
  if (PyLong_Check(o) && !PyBool_Check(o)) {
    const double v = PyLong_AsDouble(o);
    if (!PyErr_Occurred()) return v;
    PyErr_Clear();
  }
  fail(std::string(f.name) + " must be a float");
}

// How many threads a call may use (>= 1; the pool caps it, core/parallel.cpp).
inline int threads(Field f) {
  const int64_t v = integer(f);
  if (v < 1) fail(std::string(f.name) + " must be >= 1, got " + std::to_string(v));
  return int(std::min<int64_t>(v, 1 << 20));
}

inline bool flag(Field f) {
  if (!PyBool_Check(f.value.ptr())) fail(std::string(f.name) + " must be a bool");
  return f.value.ptr() == Py_True;
}

// A buffer's address (0 only where `optional` or nothing is read or written: n == 0).
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

inline Mat matrix(Field f, bool probs) {
  Mat m;
  if (f.value.is_none()) return m;
  const std::string what = f.name;
  const auto v = ints<5>(f);
  if (v[1] < kF32 || v[1] > kF16) fail(what + ": bad dtype code");
  if (probs && v[1] != kF32) fail(what + ": probabilities must be float32");
  if (v[2] < 0 || v[3] < 0) fail(what + ": negative size");
  if (v[3] > MAX_VOCAB) fail(what + ": V exceeds MAX_VOCAB = 2**22");
  m.ptr = reinterpret_cast<const void*>(uintptr_t(v[0]));
  m.dtype = int(v[1]);
  m.rows = m.ptr ? v[2] : 0;
  m.cols = v[3];
  m.stride = v[4];
  return m;
}

// A column of n values: a column view, None (absent) or, with a `slot`, a Python int stored
// there and read with stride 0.
inline IntCol int_column(Field f, int64_t n, int64_t* slot = nullptr) {
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
  if (v[2] != kI32 && v[2] != kI64) fail(std::string(f.name) + ": must be int32 or int64");
  if (!v[0] && n > 0) fail(std::string(f.name) + ": null address");
  c.ptr = reinterpret_cast<const void*>(uintptr_t(v[0]));
  c.stride = v[1];
  c.is_i32 = v[2] == kI32;
  return c;
}

// The same for float32 columns (a Python float: the caller rounded it to float32 already).
inline FloatCol float_column(Field f, int64_t n, float* slot = nullptr) {
  FloatCol c;
  if (slot && PyFloat_Check(f.value.ptr())) {
    *slot = float(PyFloat_AS_DOUBLE(f.value.ptr()));
    c.ptr = slot;
    c.stride = 0;
    return c;
  }
  const auto v = ints<3>(f);
  if (v[2] != kF32) fail(std::string(f.name) + ": must be float32");
  if (!v[0] && n > 0) fail(std::string(f.name) + ": null address");
  c.ptr = reinterpret_cast<const float*>(uintptr_t(v[0]));
  c.stride = v[1];
  return c;
}

// A column every one of n > 0 requests needs.
inline IntCol required(IntCol c, const char* name, int64_t n) {
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

// An entry point that takes its fields by keyword, run as a METH_FASTCALL | METH_KEYWORDS
// function (pybind11's dispatcher would build a dict of the keywords first: ~2 us a call,
// against ~0.1 us here): parse reads the kernel's arguments (the per-request numbers into
// `sc`, alive for the call; `threads` where the kernel has it), then the kernel runs with the
// GIL released.  C++ exceptions become Python ones as pybind11 would make them
// (invalid_argument: ValueError).
template <class Args, Args (*parse)(Fields&, Scalars&), void (*run)(const Args&),
          const char* name>
PyObject* keyword_entry(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs,
                        PyObject* kwnames) {
  try {
    check_isa_env();
    Fields f(args, nargs, kwnames, name);
    Scalars sc;
    Args a = parse(f, sc);
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

// Adds the entries of a static table (it must outlive the module) to m.
template <size_t n>
void add_entries(py::module_& m, PyMethodDef (&defs)[n]) {
  for (PyMethodDef& def : defs) {
    PyObject* fn = PyCFunction_NewEx(&def, nullptr, m.attr("__name__").ptr());
    if (!fn) throw py::error_already_set();
    m.add_object(def.ml_name, py::reinterpret_steal<py::object>(fn));
  }
}

// The entries of each binding unit (csrc/bindings/*.cpp), added by module.cpp.
void add_verify_entries(py::module_& m);  // verify.cpp: verify, verify_tree, ..., sampling_probs
void add_coin_entries(py::module_& m);    // coins.cpp: coin_walk
void add_shard_entries(py::module_& m);   // shard.cpp: shard_*
void add_probes(py::module_& m);          // probes.cpp: the tests' probes of single passes

}  // namespace binding
}  // namespace specops
