// One rank of a run's logical layout: its data-parallel replica, pipeline stage and
// tensor-parallel slice (docs/layout.md). The one spelling of the rank shape: messages,
// paths, the ledger and the placement carry a Rank, never three loose integers.
#pragma once

#include <cstdint>

namespace troupe {

struct Rank {
  int32_t dp = 0, pp = 0, tp = 0;
  bool operator==(const Rank&) const = default;
};

}  // namespace troupe
