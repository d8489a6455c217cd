// What a run produced: the coordinator hands it to the run's client at the end.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "messages/runtime.h"
#include "metrics/step_record.h"

namespace troupe::actors {

// What a run produced, handed to its client.
struct RunOutcome {
  std::string status;  // "completed", "interrupted", "failed"
  std::string error;   // why, when failed
  metrics::RunSummary summary;
  std::vector<metrics::StepRecord> steps;
  std::vector<metrics::EvalRecord> evals;
  // Sample IDs of every update, in step order (the sample audit).
  std::vector<std::vector<int64_t>> step_samples;
  // What every stage rank did in each update (rank order), for the pipeline-idle
  // measurement and the straggler report.
  std::vector<std::vector<msg::StageTiming>> step_timings;
};

}  // namespace troupe::actors
