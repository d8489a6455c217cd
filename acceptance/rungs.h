// The rungs of the acceptance ladder (docs/acceptance.md: the evidence table). Each
// function runs its part on the small model (acceptance/small_config.h) and returns
// sections with their checks decided; the ladder (acceptance/ladder.h) orders them,
// prints them and writes the report.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "acceptance/report.h"
#include "messages/config.pb.h"

namespace troupe::acceptance {

struct LadderContext {
  Config config;          // the operator's config, as loaded
  Config small;           // the small model derived from it
  std::string runs_root;  // OUT/runs: one run directory per actor run
  bool break_loss_normalization = false;  // test-only: average microbatch means
};

// Rung 1, small-model correctness.
Section boundary_masks(const LadderContext& ctx);
Section loss_normalization(const LadderContext& ctx);
// DP, PP, TP and the combined layout through the actor runtime vs the single-device
// reference after tol::kParityUpdates updates.
std::vector<Section> parallel_parity(const LadderContext& ctx);

// Rung 2, capacity: memory per stage rank against the ledger.
std::vector<Section> capacity(const LadderContext& ctx);

// Rung 3, save / kill a stage / recover, and stop / resume.
std::vector<Section> save_recover(const LadderContext& ctx);

// Rung 4, the calendar from measured throughput.
std::vector<Section> calendar(const LadderContext& ctx);

}  // namespace troupe::acceptance
