// One planned fault (engine/faults.h) for a test's config: `kind` at the actor path
// `actor` (for example "stage/dp0/pp1/tp0") in `phase` of `step`.
#pragma once

#include <cstdint>
#include <string>

#include "messages/config.pb.h"

namespace troupe::testing {

inline Fault fault(const std::string& actor, int64_t step, Fault::Phase phase, Fault::Kind kind = Fault::KILL) {
  Fault f;
  f.set_actor(actor);
  f.set_step(step);
  f.set_phase(phase);
  f.set_kind(kind);
  return f;
}

}  // namespace troupe::testing
