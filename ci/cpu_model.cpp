// The CPU feature table behind __builtin_cpu_supports, for the portable wheel's zig build only
// (ci/zig-c++ links this file into every executable and shared object it links).
//
// specops picks its SIMD level at run time with __builtin_cpu_supports (csrc/simd/isa.cpp),
// which reads the compiler runtime's __cpu_model.  GCC's libgcc and LLVM's compiler-rt fill it
// from cpuid; zig's compiler_rt (0.17) defines it as a weak, all-zero stub, so a zig build would
// report no SSE2 / AVX2 / AVX-512 and silently run the scalar level.  These strong definitions
// replace the stub with the libgcc / compiler-rt layout (the feature numbering of
// X86TargetParser.def: bit k of __cpu_features[0] is feature k) filled from cpuid, with the
// same operating-system checks: AVX, AVX2 and FMA only when XCR0 enables the XMM and YMM state,
// the AVX-512 features only when it also enables the opmask and ZMM state.  Only the features
// below 32 are reported; __cpu_features2 stays 0 (nothing in specops asks for those).
// tests/test_wheel.py checks that the wheel reports the same levels as a GCC build.
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

extern "C" {

struct __processor_model {
  unsigned int __cpu_vendor;
  unsigned int __cpu_type;
  unsigned int __cpu_subtype;
  unsigned int __cpu_features[1];
};

// hidden: the module's own references bind here, never to another library's copy
#define SPECOPS_LOCAL __attribute__((visibility("hidden")))
SPECOPS_LOCAL __processor_model __cpu_model = {0, 0, 0, {0}};
SPECOPS_LOCAL unsigned int __cpu_features2[4] = {0, 0, 0, 0};

namespace {

enum Feature {
  CMOV = 0, MMX, POPCNT, SSE, SSE2, SSE3, SSSE3, SSE4_1, SSE4_2, AVX, AVX2, SSE4_A, FMA4, XOP,
  FMA, AVX512F, BMI, BMI2, AES, PCLMUL, AVX512VL, AVX512BW, AVX512DQ, AVX512CD, AVX512ER,
  AVX512PF, AVX512VBMI, AVX512IFMA, AVX5124VNNIW, AVX5124FMAPS, AVX512VPOPCNTDQ, AVX512VBMI2
};

unsigned long long xgetbv0() {
  unsigned int eax, edx;
  __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(eax), "=d"(edx) : "c"(0));  // xgetbv
  return (static_cast<unsigned long long>(edx) << 32) | eax;
}

}  // namespace

SPECOPS_LOCAL int __cpu_indicator_init(void) __attribute__((constructor(101)));

SPECOPS_LOCAL int __cpu_indicator_init(void) {
  static bool done = false;
  if (done) return 0;
  unsigned int max_leaf, ebx, ecx, edx;
  if (!__get_cpuid(0, &max_leaf, &ebx, &ecx, &edx) || max_leaf < 1) return -1;
  const unsigned int vendor_ebx = ebx;
  unsigned int eax;
  __cpuid(1, eax, ebx, ecx, edx);
  unsigned int f = 0;
  auto set = [&f](bool on, Feature k) { if (on) f |= 1u << k; };
  set(edx & (1u << 15), CMOV);
  set(edx & (1u << 23), MMX);
  set(edx & (1u << 25), SSE);
  set(edx & (1u << 26), SSE2);
  set(ecx & (1u << 0), SSE3);
  set(ecx & (1u << 1), PCLMUL);
  set(ecx & (1u << 9), SSSE3);
  set(ecx & (1u << 19), SSE4_1);
  set(ecx & (1u << 20), SSE4_2);
  set(ecx & (1u << 23), POPCNT);
  set(ecx & (1u << 25), AES);
  const bool osxsave = ecx & (1u << 27);
  const unsigned long long xcr0 = osxsave ? xgetbv0() : 0;
  const bool ymm = osxsave && (xcr0 & 0x6) == 0x6;          // XMM and YMM state
  const bool zmm = ymm && (xcr0 & 0xe0) == 0xe0;            // + opmask, ZMM_Hi256, Hi16_ZMM
  set(ymm && (ecx & (1u << 28)), AVX);
  set(ymm && (ecx & (1u << 12)), FMA);
  if (max_leaf >= 7) {
    unsigned int ebx7, ecx7, edx7;
    __cpuid_count(7, 0, eax, ebx7, ecx7, edx7);
    set(ebx7 & (1u << 3), BMI);
    set(ymm && (ebx7 & (1u << 5)), AVX2);
    set(ebx7 & (1u << 8), BMI2);
    set(zmm && (ebx7 & (1u << 16)), AVX512F);
    set(zmm && (ebx7 & (1u << 17)), AVX512DQ);
    set(zmm && (ebx7 & (1u << 21)), AVX512IFMA);
    set(zmm && (ebx7 & (1u << 26)), AVX512PF);
    set(zmm && (ebx7 & (1u << 27)), AVX512ER);
    set(zmm && (ebx7 & (1u << 28)), AVX512CD);
    set(zmm && (ebx7 & (1u << 30)), AVX512BW);
    set(zmm && (ebx7 & (1u << 31)), AVX512VL);
    set(zmm && (ecx7 & (1u << 1)), AVX512VBMI);
    set(zmm && (ecx7 & (1u << 6)), AVX512VBMI2);
    set(zmm && (ecx7 & (1u << 14)), AVX512VPOPCNTDQ);
    set(zmm && (edx7 & (1u << 2)), AVX5124VNNIW);
    set(zmm && (edx7 & (1u << 3)), AVX5124FMAPS);
  }
  __cpu_model.__cpu_vendor = vendor_ebx == signature_INTEL_ebx ? 1
                             : vendor_ebx == signature_AMD_ebx ? 2 : 3;  // VENDOR_OTHER
  __cpu_model.__cpu_features[0] = f;
  done = true;
  return 0;
}

}  // extern "C"
#endif
