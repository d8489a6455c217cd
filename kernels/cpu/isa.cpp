#include "kernels/cpu/isa.h"

#include <cpuid.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

namespace troupe::kernels::cpu {
namespace {

struct Regs {
  unsigned a = 0, b = 0, c = 0, d = 0;
};

Regs cpuid(unsigned leaf, unsigned sub = 0) {
  Regs r;
  if (!__get_cpuid_count(leaf, sub, &r.a, &r.b, &r.c, &r.d)) r = Regs{};
  return r;
}

// XCR0: which register states the OS saves on a context switch.
uint64_t xcr0() {
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t(hi) << 32) | lo;
}

bool bit(unsigned word, int b) { return (word >> b) & 1u; }

bool os_saves_avx512() {
  if (!bit(cpuid(1).c, 27)) return false;  // OSXSAVE: xgetbv is usable
  // SSE, AVX (ymm upper halves), opmask, zmm upper halves of 0-15, zmm 16-31.
  constexpr uint64_t kMask = (1u << 1) | (1u << 2) | (1u << 5) | (1u << 6) | (1u << 7);
  return (xcr0() & kMask) == kMask;
}

}  // namespace

bool cpu_has_avx512() {
  static const bool has = [] {
    const Regs r = cpuid(7);
    return bit(r.b, 16) && bit(r.b, 17) && bit(r.b, 30) && bit(r.b, 31) && os_saves_avx512();
  }();
  return has;
}

Isa choose_isa(const char* env, bool has_avx512) {
  const std::string want = env ? env : "";
  if (want.empty() || want == "auto") return has_avx512 ? Isa::kAvx512 : Isa::kAvx2;
  if (want == "avx2") return Isa::kAvx2;
  if (want == "avx512") {
    if (!has_avx512)
      throw std::runtime_error(
          "TROUPE_CPU_ISA=avx512: this CPU (or its OS) lacks AVX-512 F/BW/DQ/VL; use avx2 or leave it unset");
    return Isa::kAvx512;
  }
  throw std::runtime_error("TROUPE_CPU_ISA=\"" + want + "\": expected avx2, avx512 or auto");
}

Isa active_isa() {
  static const Isa isa = choose_isa(std::getenv("TROUPE_CPU_ISA"), cpu_has_avx512());  // a throw leaves it unset: the next call throws again
  return isa;
}

const char* isa_name(Isa isa) { return isa == Isa::kAvx512 ? "AVX-512" : "AVX2"; }

std::string cpu_features_line() {
  std::string brand;
  if (cpuid(0x80000000).a >= 0x80000004) {
    char buf[49] = {};
    for (unsigned i = 0; i < 3; ++i) {
      const Regs r = cpuid(0x80000002 + i);
      std::memcpy(buf + 16 * i, &r, 16);
    }
    brand = buf;
    const size_t b = brand.find_first_not_of(' ');
    brand = b == std::string::npos ? "" : brand.substr(b);
  }
  const Regs l1 = cpuid(1), l7 = cpuid(7), l71 = cpuid(7, 1);
  struct Flag {
    const char* name;
    bool on;
  };
  const Flag flags[] = {
      {"avx", bit(l1.c, 28)},           {"fma", bit(l1.c, 12)},
      {"f16c", bit(l1.c, 29)},          {"avx2", bit(l7.b, 5)},
      {"avx512f", bit(l7.b, 16)},       {"avx512dq", bit(l7.b, 17)},
      {"avx512ifma", bit(l7.b, 21)},    {"avx512cd", bit(l7.b, 28)},
      {"avx512bw", bit(l7.b, 30)},      {"avx512vl", bit(l7.b, 31)},
      {"avx512vbmi", bit(l7.c, 1)},     {"avx512_vnni", bit(l7.c, 11)},
      {"avx512_bf16", bit(l71.a, 5)},   {"avx512_fp16", bit(l7.d, 23)},
      {"amx_tile", bit(l7.d, 24)},      {"amx_bf16", bit(l7.d, 22)},
  };
  std::string out = brand.empty() ? "unknown CPU" : brand;
  out += ";";
  for (const Flag& f : flags)
    if (f.on) out += std::string(" ") + f.name;
  if (bit(l7.b, 16) && !os_saves_avx512()) out += " (the OS does not save the zmm state: AVX-512 unusable)";
  return out;
}

}  // namespace troupe::kernels::cpu
