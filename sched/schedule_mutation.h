// TEST-ONLY: a deliberate breakage of a run's op lists, so that a test can show that a
// broken list is refused when a run starts rather than hanging once the actors walk it
// (docs/runtime.md, "The schedule verifier"). verified_pipeline_schedule(const Config&)
// applies the mutation named by the environment variable TROUPE_TEST_SCHEDULE_MUTATION
// between building the lists and verifying them; unset (always, outside tests) it
// changes nothing. The text is one of
//   "swap STAGE I J"   exchange ops I and J of stage STAGE's list
//   "drop STAGE I"     remove op I of stage STAGE's list
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "sched/pipeline_schedule.h"

namespace troupe::sched {

inline constexpr const char* kScheduleMutationEnv = "TROUPE_TEST_SCHEDULE_MUTATION";

struct ScheduleMutation {
  enum class Kind { kSwap, kDrop } kind = Kind::kSwap;
  int32_t stage = 0, first = 0, second = 0;  // second: kSwap only
};

// Parses the text above; throws std::invalid_argument naming the variable and the text.
ScheduleMutation parse_schedule_mutation(const std::string& text);
// The mutation the environment names, if any.
std::optional<ScheduleMutation> schedule_mutation_from_env();
// Applies m to s; throws std::invalid_argument when a stage or op index is outside s.
void apply_schedule_mutation(const ScheduleMutation& m, PipelineSchedule& s);

}  // namespace troupe::sched
