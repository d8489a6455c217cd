// Deterministic initial weights. Every element's value is a pure function of
// (training.seed, tensor name, the element's index in the GLOBAL tensor), drawn from
// a counter-based generator (Philox4x32-10). So a pipeline stage, a tensor-parallel
// slice or the whole model all start from identical values for the same tensor, and
// parity tests can build any cut from the same config.
//
//   normal element i of tensor `name`: counter = (i / 2, fnv1a64(name)), key = seed;
//   the four 32-bit outputs give two uniforms -> two Box-Muller normals, element
//   i takes the cos (i even) or sin (i odd) one; value = init_std * normal.
// Rows at or past ParamTensor::valid_rows (the vocabulary padding of wte) are zero.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "model/param_registry.h"

namespace troupe::model {

std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);
uint64_t fnv1a64(std::string_view s);

// The standard normal the generator assigns to element `index` of tensor `name`.
double init_normal(uint64_t seed, std::string_view name, int64_t index);

// Writes every tensor of `reg` into host memory `params` (reg.total() floats),
// using up to `threads` threads (the values do not depend on it).
void init_parameters(const ParameterRegistry& reg, uint64_t seed, float* params, int threads = 1);

}  // namespace troupe::model
