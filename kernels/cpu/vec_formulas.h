// exp and the tanh-approximation GELU, written once for any vector width.
//
// `V` names a register type and its operations (vec_math.h's Avx2Lanes, gelu_avx512.cpp's
// Avx512Lanes): set(c), min, max, add, sub, mul, div, fmadd(a, b, c) = a * b + c,
// fnmadd(a, b, c) = c - a * b, round(x) to the nearest integer, and pow2(n) = 2^n for an
// integral n in [-126, 127] (through the exponent bits). Every width runs the same
// operations in the same order, so an element's bits do not depend on the width (the
// AVX2 and AVX-512 GELU agree bit for bit: test/kernels/isa_gelu_test.cpp).
#pragma once

namespace troupe::kernels::cpu::formulas {

// exp(x): inputs clamped to [-87.3, 88.7] (exp underflows to about 1e-38 there instead
// of denormals; overflow is impossible); range reduction to r in [-ln2/2, ln2/2] and a
// degree-6 polynomial, max error about 2 ulp over the clamped range.
template <class V>
typename V::Reg exp(typename V::Reg x) {
  x = V::max(V::min(x, V::set(88.7f)), V::set(-87.3f));
  // n = round(x / ln2); r = x - n * ln2 (ln2 split in two for accuracy)
  const auto n = V::round(V::mul(x, V::set(1.44269504088896341f)));
  auto r = V::fnmadd(n, V::set(0.693359375f), x);
  r = V::fnmadd(n, V::set(-2.12194440e-4f), r);
  // e^r = 1 + r + r^2 * P(r), P a degree-5 minimax polynomial
  auto p = V::set(1.9875691500e-4f);
  p = V::fmadd(p, r, V::set(1.3981999507e-3f));
  p = V::fmadd(p, r, V::set(8.3334519073e-3f));
  p = V::fmadd(p, r, V::set(4.1665795894e-2f));
  p = V::fmadd(p, r, V::set(1.6666665459e-1f));
  p = V::fmadd(p, r, V::set(5.0000001201e-1f));
  const auto r2 = V::mul(r, r);
  p = V::fmadd(p, r2, V::add(r, V::set(1.0f)));
  // scale by 2^n (n in [-126, 128] after the clamp; 128 cannot occur because
  // 88.7 / ln2 < 127.97)
  return V::mul(p, V::pow2(n));
}

// tanh-approximation GELU and its derivative:
//   gelu(x)  = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
//   gelu'(x) = 0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
// with tanh(u) = 1 - 2 / (exp(2u) + 1). Returns tanh(u); du_dx, when given, gets du/dx.
template <class V>
typename V::Reg tanh_of_gelu_arg(typename V::Reg x, typename V::Reg* du_dx) {
  const auto k0 = V::set(0.7978845608028654f), k1 = V::set(0.044715f);
  const auto x2 = V::mul(x, x);
  const auto u = V::mul(k0, V::fmadd(V::mul(k1, x2), x, x));
  if (du_dx) *du_dx = V::mul(k0, V::fmadd(V::set(3.0f * 0.044715f), x2, V::set(1.0f)));
  const auto e = exp<V>(V::add(u, u));
  return V::sub(V::set(1.0f), V::div(V::set(2.0f), V::add(e, V::set(1.0f))));
}

template <class V>
typename V::Reg gelu(typename V::Reg x) {
  const auto t = tanh_of_gelu_arg<V>(x, nullptr);
  return V::mul(V::mul(V::set(0.5f), x), V::add(V::set(1.0f), t));
}

template <class V>
typename V::Reg gelu_grad(typename V::Reg x) {
  typename V::Reg du;
  const auto t = tanh_of_gelu_arg<V>(x, &du);
  const auto half = V::set(0.5f), one = V::set(1.0f);
  const auto sech2 = V::fnmadd(t, t, one);
  return V::fmadd(half, V::add(one, t), V::mul(V::mul(half, x), V::mul(sech2, du)));
}

}  // namespace troupe::kernels::cpu::formulas
