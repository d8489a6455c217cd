// engine/run_state: what a run changes as it goes (the skip list, where the group
// resumes), kept apart from its Config, which the run state never edits.
#include <doctest/doctest.h>

#include <vector>

#include "config/validate.h"
#include "engine/placement.h"
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

TEST_CASE("the placement is run state: a group's topology is the config's logical layout on it") {
  Config c;
  c.mutable_parallel()->set_data(4);
  c.mutable_parallel()->set_pipeline(2);
  RunState s = RunState::of(c);
  CHECK(s.physical_replicas == 4);  // unset: one physical replica per logical one
  c.mutable_parallel()->set_physical_replicas(2);
  s = RunState::of(c);
  CHECK(s.physical_replicas == 2);
  const engine::Topology logical = engine::Topology::logical(c);  // the config's placement is not read
  CHECK(logical.physical_replicas() == 4);
  CHECK_FALSE(logical.hosts_several());
  // A later start on another placement: the same logical ranks, other hosts.
  s.physical_replicas = 1;
  const engine::Topology t = s.topology(c);
  CHECK(t.dp == 4);
  CHECK(t.pp == 2);
  CHECK(t.hosted() == 4);
  CHECK(t.host_of({3, 1, 0}) == Rank{0, 1, 0});
  CHECK(t.round_of({3, 1, 0}) == 3);
  CHECK(t.all_ranks() == logical.all_ranks());
}

TEST_CASE("a placement over fewer workers than configured: the physical ranks in blocks, hosted ranks with their host") {
  Config c;
  c.mutable_parallel()->set_data(4);
  c.mutable_parallel()->set_pipeline(2);
  c.mutable_cluster()->set_workers(4);
  const engine::Topology logical = engine::Topology::logical(c);
  // As configured: replica d's two stages on worker d.
  const auto p4 = placement_of(c, logical);
  REQUIRE(p4.workers() == 4);
  CHECK(p4.ranks_of[1] == std::vector<int32_t>{2, 3});
  // Two physical replicas over three workers: physical ranks 0..3 in blocks of 1, 1, 2
  // (comm::chunk_range); logical replica 2 (ranks 4, 5) lives with replica 0, replica 3
  // (6, 7) with replica 1.
  const auto p2 = placement_of(c, logical.placed_on(2), 3);
  REQUIRE(p2.workers() == 3);
  CHECK(p2.ranks_of[0] == std::vector<int32_t>{0});
  CHECK(p2.ranks_of[1] == std::vector<int32_t>{1});
  CHECK(p2.ranks_of[2] == std::vector<int32_t>{2, 3});
  CHECK(p2.worker_of == std::vector<int32_t>{0, 1, 2, 2, 0, 1, 2, 2});
  CHECK_THROWS_AS(placement_of(c, logical.placed_on(2), 5), std::invalid_argument);  // 5 workers, 4 physical ranks
  // EXPLICIT lists name the configured workers' ranks: no other placement.
  c.mutable_cluster()->set_placement(ClusterConfig::EXPLICIT);
  for (int w = 0; w < 4; ++w) {
    auto* list = c.mutable_cluster()->add_worker();
    list->add_rank(2 * w);
    list->add_rank(2 * w + 1);
  }
  CHECK(placement_of(c, logical).ranks_of[3] == std::vector<int32_t>{6, 7});
  CHECK_THROWS_AS(placement_of(c, logical.placed_on(2), 2), std::invalid_argument);
  // The floor of a shrink is checked with the cluster section.
  c.mutable_cluster()->set_min_physical_replicas(5);
  const auto v = cluster_violations(c);
  REQUIRE(v.size() == 1);
  CHECK(v[0].field == "cluster.min_physical_replicas");
  CHECK(v[0].rule == "5 is outside 1..parallel.data = 4 (the fewest physical data-parallel replicas a shrink may leave)");
}

TEST_CASE("merge_skip_samples sorts, drops repeats and says whether the list grew") {
  std::vector<int64_t> skip{5, 1, 5};
  CHECK_FALSE(merge_skip_samples(skip, std::vector<int64_t>{1, 5}));
  CHECK(skip == std::vector<int64_t>{1, 5});
  CHECK(merge_skip_samples(skip, std::vector<int64_t>{2}));
  CHECK(skip == std::vector<int64_t>{1, 2, 5});
  CHECK_FALSE(merge_skip_samples(skip, {}));
}
