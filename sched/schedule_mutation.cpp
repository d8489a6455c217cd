#include "sched/schedule_mutation.h"

#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <utility>

namespace troupe::sched {

ScheduleMutation parse_schedule_mutation(const std::string& text) {
  std::istringstream in(text);
  std::string verb;
  ScheduleMutation m;
  in >> verb;
  bool ok = false;
  if (verb == "swap") {
    m.kind = ScheduleMutation::Kind::kSwap;
    ok = bool(in >> m.stage >> m.first >> m.second);
  } else if (verb == "drop") {
    m.kind = ScheduleMutation::Kind::kDrop;
    ok = bool(in >> m.stage >> m.first);
  }
  std::string rest;
  if (!ok || (in >> rest))
    throw std::invalid_argument(std::string(kScheduleMutationEnv) + "='" + text +
                                "': expected \"swap STAGE I J\" or \"drop STAGE I\" (test-only)");
  return m;
}

std::optional<ScheduleMutation> schedule_mutation_from_env() {
  const char* text = std::getenv(kScheduleMutationEnv);
  if (!text || !*text) return std::nullopt;
  return parse_schedule_mutation(text);
}

void apply_schedule_mutation(const ScheduleMutation& m, PipelineSchedule& s) {
  auto outside = [&](const std::string& what) {
    return std::invalid_argument(std::string(kScheduleMutationEnv) + ": " + what + " outside the schedule (p = " +
                                 std::to_string(s.stages) + ", m = " + std::to_string(s.microbatches) + ")");
  };
  if (m.stage < 0 || size_t(m.stage) >= s.ops.size()) throw outside("stage " + std::to_string(m.stage));
  auto& ops = s.ops[size_t(m.stage)];
  auto check = [&](int32_t i) {
    if (i < 0 || size_t(i) >= ops.size())
      throw outside("op " + std::to_string(i) + " of stage " + std::to_string(m.stage));
  };
  check(m.first);
  if (m.kind == ScheduleMutation::Kind::kDrop) {
    ops.erase(ops.begin() + m.first);
    return;
  }
  check(m.second);
  std::swap(ops[size_t(m.first)], ops[size_t(m.second)]);
}

}  // namespace troupe::sched
