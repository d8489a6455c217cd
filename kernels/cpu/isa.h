// Which vector instruction set troupe's CPU kernels may use: chosen once per process
// from cpuid (and the OS's saved-state mask), never from the compiler's -march, so one
// binary serves every x86-64-v3 machine. Today it selects the GEMM (kernels/cpu/gemm.h:
// oneDNN, troupe's AVX-512 sgemm or OpenBLAS) and GELU's variant (kernels/cpu/gelu.h,
// bitwise the same either way); the other loops have AVX2 variants only (none is a
// measurable share of a step, docs/performance.md).
//
//   TROUPE_CPU_ISA=avx2     the AVX2 + FMA variants (the build's baseline)
//   TROUPE_CPU_ISA=avx512   the AVX-512 variants (an error on a CPU without them)
//   unset or "auto"         AVX-512 where the CPU and OS have AVX-512 F, BW, DQ and VL,
//                           else AVX2
// Any other value is an error naming the variable. The two GEMMs do not agree bit for
// bit (docs/compute.md, "Instruction sets and the GEMM").
#pragma once

#include <string>

namespace troupe::kernels::cpu {

enum class Isa { kAvx2, kAvx512 };

// The CPU (and the OS: XGETBV says it saves the zmm and mask registers) runs
// AVX-512 F + BW + DQ + VL.
bool cpu_has_avx512();

// The ISA of this process's kernels (TROUPE_CPU_ISA, else the CPU's best); read once.
// Throws std::runtime_error for a bad TROUPE_CPU_ISA or avx512 on a CPU without it.
Isa active_isa();

// The choice active_isa() makes from TROUPE_CPU_ISA's value (nullptr: unset).
Isa choose_isa(const char* env, bool has_avx512);

const char* isa_name(Isa isa);  // "AVX2" or "AVX-512"

// "Intel(R) Xeon(R) Processor; avx2 fma avx512f avx512dq avx512bw avx512vl ..." (the
// brand string and the vector extensions cpuid reports).
std::string cpu_features_line();

}  // namespace troupe::kernels::cpu
