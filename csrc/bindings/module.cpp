// specops._C: the pybind11 module of the torch-free kernels.  Every kernel entry takes named
// fields (bindings/fields.h: verify.cpp, coins.cpp, shard.cpp); probes.cpp holds the tests'
// probes of single passes; here the module's own facts (its binding version, the ISA level,
// the compiled constants).
#include <pybind11/stl.h>

#include <iterator>

#include "bindings/fields.h"
#include "core/float_bits.h"
#include "core/pexp.h"
#include "core/philox.h"

namespace py = pybind11;

namespace {

// The call convention of the entries (fields by name, as fields.h reads them) and their
// fields; specops/backends/native.py (cpu.py, cpu_shard.py) refuses a module built with
// another (an editable install whose C++ was not rebuilt).
constexpr int kBindingVersion = 4;

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
  SPECOPS_CONSTANT(DRAFT_MASS_TOLERANCE);
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
  namespace b = specops::binding;
  m.doc() = "specops CPU kernels (torch-free C++; the spec: specops/reference/__init__.py)";
  m.attr("BINDING_VERSION") = kBindingVersion;
  b::add_verify_entries(m);  // verify, verify_tree, verify_traversal, verify_gbv, sampling_probs
  b::add_coin_entries(m);    // coin_walk
  b::add_shard_entries(m);   // shard_*
  b::add_probes(m);          // philox, pexp, exp_pass, materialize, tree_update, block_mass

  m.def("isa", &specops::isa,
        "The active ISA level: 'scalar', 'sse2', 'avx2' or 'avx512'.  Raises ValueError when "
        "SPECOPS_CPU_ISA asks for a level that is unknown or cannot run here.");
  m.def("set_isa", &specops::set_isa, py::arg("level"),
        "Switch the ISA level in-process (tests); ValueError for a level that cannot run here.");
  m.def("available_isas", &specops::available_isas,
        "The levels this build contains and this CPU runs, lowest first.");
  m.def("constants", &constants, "The constants of the spec as compiled (see specops.reference).");
}
