// Run-time choice of the ISA level (see passes.h).  Default: the best level this build
// contains and this CPU runs.  SPECOPS_CPU_ISA=scalar|sse2|avx2|avx512 asks for one; an unknown
// name or a level the CPU (or the build) lacks is an error that names the variable, raised by
// every entry point until set_isa() picks a level explicitly: never a silent fallback.
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "simd/passes.h"

namespace specops {
namespace {

struct Level {
  const char* name;
  const Passes* table;  // null: not in this build
  bool (*cpu_has)();
};

bool always() { return true; }
#if defined(__x86_64__) || defined(__i386__)
bool cpu_sse2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("sse2");
}
bool cpu_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("popcnt");
}
// (libgcc reports the AVX-512 features only when the OS saves the ZMM and mask state)
bool cpu_avx512() {
  __builtin_cpu_init();
  return cpu_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
}
#else
bool cpu_sse2() { return false; }
bool cpu_avx2() { return false; }
bool cpu_avx512() { return false; }
#endif

const Level kLevels[] = {
    {"scalar", &kPassesScalar, &always},
#if defined(SPECOPS_WITH_SSE2)
    {"sse2", &kPassesSse2, &cpu_sse2},
#else
    {"sse2", nullptr, &cpu_sse2},
#endif
#if defined(SPECOPS_WITH_AVX2)
    {"avx2", &kPassesAvx2, &cpu_avx2},
#else
    {"avx2", nullptr, &cpu_avx2},
#endif
#if defined(SPECOPS_WITH_AVX512)
    {"avx512", &kPassesAvx512, &cpu_avx512},
#else
    {"avx512", nullptr, &cpu_avx512},
#endif
};

bool runs_here(const Level& l) { return l.table != nullptr && l.cpu_has(); }

std::string names(bool only_available) {
  std::string s;
  for (const Level& l : kLevels) {
    if (only_available && !runs_here(l)) continue;
    s += s.empty() ? "" : ", ";
    s += l.name;
  }
  return s;
}

// The level called `name`, or an error message (naming `what`) saying why it cannot run.
const Passes* find(const std::string& name, const std::string& what, std::string& error) {
  for (const Level& l : kLevels) {
    if (name != l.name) continue;
    if (runs_here(l)) return l.table;
    error = what + " asks for the '" + name + "' level, which " +
            (l.table ? "this CPU does not support" : "this build of specops._C does not contain") +
            " (available here: " + names(true) + ")";
    return nullptr;
  }
  error = what + " must be one of " + names(false) + " (available here: " + names(true) + ")";
  return nullptr;
}

struct State {
  const Passes* active = &kPassesScalar;
  std::string env_error;  // non-empty: SPECOPS_CPU_ISA cannot be honoured
  State() {
    for (const Level& l : kLevels)
      if (runs_here(l)) active = l.table;  // levels are listed lowest first
    const char* env = std::getenv("SPECOPS_CPU_ISA");
    if (env && *env) {
      std::string error;
      const Passes* p = find(env, std::string("SPECOPS_CPU_ISA='") + env + "'", error);
      if (p)
        active = p;
      else
        env_error = error;
    }
  }
};

State& state() {
  static State s;
  return s;
}

}  // namespace

const Passes& passes() { return *state().active; }

void check_isa_env() {
  const State& s = state();
  if (!s.env_error.empty()) throw std::invalid_argument(s.env_error);
}

std::string isa() {
  check_isa_env();
  return state().active->name;
}

void set_isa(const std::string& name) {
  std::string error;
  const Passes* p = find(name, "set_isa('" + name + "')", error);
  if (!p) throw std::invalid_argument(error);
  State& s = state();
  s.active = p;
  s.env_error.clear();
}

std::vector<std::string> available_isas() {
  std::vector<std::string> v;
  for (const Level& l : kLevels)
    if (runs_here(l)) v.push_back(l.name);
  return v;
}

}  // namespace specops
