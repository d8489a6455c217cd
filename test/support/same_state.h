// The bitwise comparison of two runs' final states: every parameter and both Adam
// moments, tensor by tensor, memcmp-equal (so -0 and 0, or two NaNs, differ as their
// bits do), and the Adam step counter equal.
#pragma once

#include <doctest/doctest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "engine/state_snapshot.h"

namespace troupe::testing {

inline void check_same_state(const engine::NamedState& got, const engine::NamedState& want) {
  CHECK(got.adam_steps == want.adam_steps);
  REQUIRE(got.params.size() == want.params.size());
  for (const auto& [name, values] : want.params) {
    CAPTURE(name);
    using Member = std::map<std::string, std::vector<float>> engine::NamedState::*;
    for (Member kind : {&engine::NamedState::params, &engine::NamedState::exp_avg, &engine::NamedState::exp_avg_sq}) {
      const auto& a = (got.*kind).at(name);
      const auto& b = (want.*kind).at(name);
      REQUIRE(a.size() == b.size());
      CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
    }
  }
}

}  // namespace troupe::testing
