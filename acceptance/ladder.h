// The acceptance ladder as one call (behind `supervisor acceptance`): derive the small
// model from a config, write the acceptance dataset, run every rung in order, print
// each section's PASS / FAIL with its numbers as it finishes, and write report.md and
// report.json. Rungs (docs/acceptance.md, the evidence table):
//   1 small-model correctness: boundary masks, loss normalization, DP / PP / TP /
//     combined parity with the single-device reference
//   2 capacity: memory per stage rank against the ledger
//   3 save / recover: kill a stage and recover; stop and resume
//   4 calendar: days to the token budget from measured throughput
#pragma once

#include <cstdio>
#include <string>

#include "acceptance/report.h"
#include "messages/config.pb.h"

namespace troupe::acceptance {

struct AcceptanceOptions {
  std::string out_dir;         // report, dataset and the runs' directories go here
  std::string config_source;   // for the report ("" = the embedded default)
  int max_ranks = 64;          // refuse layouts with more stage ranks (all run as threads here)
  // Test-only: the loss-normalization section averages microbatch means, so it must FAIL.
  bool break_loss_normalization = false;
  std::FILE* console = stdout;  // nullptr: print nothing
};

// Runs the ladder and writes OUT/report.{md,json}. Throws for bad input (a layout
// over max_ranks, an unwritable directory); a failing check is a FAIL in the report.
Report run_acceptance(const Config& config, const AcceptanceOptions& options);

// The command's exit status: 0 when no rung failed, 1 otherwise.
inline int exit_status(const Report& r) { return r.passed() ? 0 : 1; }

}  // namespace troupe::acceptance
