// Run-time choice of the ISA level (see passes.h).  Default: the best level this build
// contains and this CPU runs.  SPECOPS_CPU_ISA=scalar|sse2|avx2|avx512 asks for one; an unknown
// name or a level the CPU (or the build) lacks is an error that names the variable, raised by
// every entry point until set_isa() picks a level explicitly: never a silent fallback.
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "simd/passes.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace specops {
namespace {

struct Level {
  const char* name;
  const Passes* table;  // null: not in this build
  bool (*cpu_has)();
};

bool always() { return true; }
#if defined(__x86_64__) || defined(__i386__)
// The CPU's features from cpuid directly (not __builtin_cpu_supports: zig's runtime, which
// the portable wheel is built with, has only an all-zero stub of the table behind it).  AVX2
// and AVX-512 count only when the OS saves their register state (XCR0), as libgcc's table.
struct CpuFeatures {
  bool sse2 = false, avx2 = false, popcnt = false, avx512f = false, avx512dq = false;
};

unsigned long long xgetbv0() {
  unsigned int eax, edx;
  __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(eax), "=d"(edx) : "c"(0));  // xgetbv
  return (static_cast<unsigned long long>(edx) << 32) | eax;
}

CpuFeatures read_cpu() {
  CpuFeatures f;
  unsigned int max_leaf, eax, ebx, ecx, edx;
  if (!__get_cpuid(0, &max_leaf, &ebx, &ecx, &edx) || max_leaf < 1) return f;
  __cpuid(1, eax, ebx, ecx, edx);
  f.sse2 = edx & (1u << 26);
  f.popcnt = ecx & (1u << 23);
  const bool osxsave = ecx & (1u << 27);
  const unsigned long long xcr0 = osxsave ? xgetbv0() : 0;
  const bool ymm = osxsave && (xcr0 & 0x6) == 0x6;    // XMM and YMM state
  const bool zmm = ymm && (xcr0 & 0xe0) == 0xe0;      // + opmask, ZMM_Hi256, Hi16_ZMM
  if (max_leaf >= 7) {
    unsigned int ebx7, ecx7, edx7;
    __cpuid_count(7, 0, eax, ebx7, ecx7, edx7);
    f.avx2 = ymm && (ebx7 & (1u << 5));
    f.avx512f = zmm && (ebx7 & (1u << 16));
    f.avx512dq = zmm && (ebx7 & (1u << 17));
  }
  return f;
}

const CpuFeatures& cpu() {
  static const CpuFeatures f = read_cpu();
  return f;
}

bool cpu_sse2() { return cpu().sse2; }
bool cpu_avx2() { return cpu().avx2 && cpu().popcnt; }
bool cpu_avx512() { return cpu_avx2() && cpu().avx512f && cpu().avx512dq; }
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
