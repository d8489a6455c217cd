// engine/run_state: what a run changes as it goes (the skip list, where the group
// resumes), kept apart from its Config, which the run state never edits.
#include <doctest/doctest.h>

#include <vector>

#include "engine/rollback.h"
#include "engine/run_state.h"

using namespace troupe;
using namespace troupe::engine;

TEST_CASE("the run state starts from the config and grows by resumes and rollbacks; the config is untouched") {
  Config c;
  for (const int64_t id : {40, 7, 40, 12}) c.mutable_data()->add_skip_samples(id);
  c.mutable_checkpoint()->set_load("latest");
  const Config given = c;

  RunState s = RunState::of(c);
  CHECK(s.skip_samples == std::vector<int64_t>{7, 12, 40});  // sorted, each once
  CHECK(s.resume_from == "latest");
  CHECK(s.rollbacks == 0);

  // A resume: the checkpoint's list joins (already there: no growth).
  CheckpointManifest m;
  for (const int64_t id : {12, 40}) m.mutable_data_position()->add_skip_samples(id);
  CHECK_FALSE(s.add_checkpoint_skips(m));
  m.mutable_data_position()->add_skip_samples(3);
  CHECK(s.add_checkpoint_skips(m));
  CHECK(s.skip_samples == std::vector<int64_t>{3, 7, 12, 40});

  // A rollback: the spike's samples skipped, the kept checkpoint resumed.
  RollbackRequest r;
  r.spike_step = 9;
  r.skip_ids = {41, 42, 7};
  RollbackDone d;
  d.target_step = 4;
  d.target_dir = "/runs/x/checkpoints/step_00000004";
  s.roll_back(r, d);
  CHECK(s.skip_samples == std::vector<int64_t>{3, 7, 12, 40, 41, 42});
  CHECK(s.resume_from == d.target_dir);
  CHECK(s.rollbacks == 1);
  // None kept: the next group starts fresh.
  s.roll_back(RollbackRequest{}, RollbackDone{});
  CHECK(s.resume_from.empty());
  CHECK(s.rollbacks == 2);

  CHECK(c.SerializeAsString() == given.SerializeAsString());
}

TEST_CASE("merge_skip_samples sorts, drops repeats and says whether the list grew") {
  std::vector<int64_t> skip{5, 1, 5};
  CHECK_FALSE(merge_skip_samples(skip, std::vector<int64_t>{1, 5}));
  CHECK(skip == std::vector<int64_t>{1, 5});
  CHECK(merge_skip_samples(skip, std::vector<int64_t>{2}));
  CHECK(skip == std::vector<int64_t>{1, 2, 5});
  CHECK_FALSE(merge_skip_samples(skip, {}));
}
