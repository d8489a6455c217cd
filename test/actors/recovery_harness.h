// What the recovery suites share: the DP2 x PP2 run they break (6 updates of 8 samples,
// a checkpoint every 2 updates, a fresh run directory per test), faults by actor path,
// the fault-free reference run, and the bitwise comparison with it.
#pragma once

#include <string>

#include "actors/runtime.h"
#include "messages/config.pb.h"
#include "test/support/fault.h"

namespace troupe::testing::recovery {

// DP2 x PP2, `steps` updates of 8 samples, a checkpoint every 2 updates (committed
// before the next step starts), TensorBoard off, into /tmp/troupe-recovery-NAME (emptied).
Config base(const std::string& name, int steps = 6);

using testing::fault;  // test/support/fault.h

// Runs `c` in this process without console output, collecting the final state.
actors::RunResult run(const Config& c);

// The fault-free run of base("clean"), run once.
const actors::RunResult& clean();

// `r` completed with the clean run's steps (loss and lr bitwise), weights and moments,
// and each of the 48 samples in exactly one update of its final timeline.
void check_identical_to_clean(const actors::RunResult& r);

}  // namespace troupe::testing::recovery
