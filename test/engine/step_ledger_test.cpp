// engine::StepLedger's check of what the optimizer shards applied against the
// coordinator's decision (docs/runtime.md, "Who decides the update").
#include <doctest/doctest.h>

#include <string>

#include "engine/step_ledger.h"
#include "engine/topology.h"

using namespace troupe;
using namespace troupe::engine;

namespace {

msg::StageDone done(const Rank& r, const msg::UpdateCommand& applied) {
  msg::StageDone d;
  d.step = applied.step;
  d.rank = r;
  d.applied = applied;
  return d;
}

}  // namespace

TEST_CASE("the step ledger names the first shard whose applied update is not the decision") {
  const Topology t{1, 2, 1};  // PP2: two shards
  const msg::UpdateCommand decided{4, 3e-4, 0.5, false};

  SUBCASE("every shard applied the decision") {
    StepLedger l(t, msg::StepKind::Train, 4, 2);
    l.add(done({0, 0, 0}, decided));
    l.add(done({0, 1, 0}, decided));
    CHECK(l.applied_mismatch(decided).empty());
  }
  SUBCASE("another clip factor, learning rate, skip or step") {
    auto other = decided;
    SUBCASE("clip factor") { other.clip_factor = 0.25; }
    SUBCASE("lr") { other.lr = 2e-4; }
    SUBCASE("skip") { other.skip = true; }
    SUBCASE("step") { other.step = 3; }
    StepLedger l(t, msg::StepKind::Train, 4, 2);
    l.add(done({0, 0, 0}, decided));
    auto second = done({0, 1, 0}, other);
    second.step = 4;  // reported for this step, whatever the update it names
    l.add(second);
    const auto why = l.applied_mismatch(decided);
    CAPTURE(why);
    CHECK(why.find(optim_path({0, 1, 0})) == 0);
    CHECK(why.find("but the coordinator decided step 4 at lr 0.0003 with clip factor 0.5") != std::string::npos);
  }
}
