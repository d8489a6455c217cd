// Who decides a step's update (docs/runtime.md, "Who decides the update"). With one rank
// and logging.on_spike RECORD, the optimizer shard decides from its own norm partial and
// applies it without an UpdateCommand; with the spike guard acting (SKIP_UPDATE), the
// coordinator decides and sends UpdateCommands, as on every layout with more than one
// shard. Over 6 updates too few to judge a spike (spike_min_history 10), the guard drops
// nothing, so both flows must give the same bits, and the shard's flow the single-device
// reference's values within the parity tolerances (test/actors/parity_check.h).
// Checkpoints every 2 steps put both deciders in the shard's run: the coordinator decides
// the updates of the steps after a saved one (3, 5), which go out ahead too, so that its
// SnapshotCommand reaches the shard before the next update (docs/runtime.md,
// "Checkpoints in a run"); the shard decides the others.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <vector>

#include <caf/all.hpp>

#include "actors/directory.h"
#include "actors/message_types.h"
#include "actors/optimizer_actor.h"
#include "ckpt/commit.h"
#include "engine/checkpointing.h"
#include "engine/rank_device.h"
#include "engine/stage_worker.h"
#include "optim/grad_clip.h"
#include "test/actors/parity_check.h"
#include "test/support/scratch_dir.h"

using namespace troupe;
using namespace troupe::testing;

namespace {

constexpr double kClipGrad = 2.0;  // the norms run from about 2.5 down to 1.3

Config one_rank(const ScratchDir& dir, const std::string& name) {
  Config c = with_steps(parity_layout(1, 1, "unused"), 6);
  c.mutable_logging()->set_run_dir(dir / name);
  c.mutable_checkpoint()->set_interval_steps(2);
  // Below the first updates' norms, above the later ones': both clip decisions occur.
  c.mutable_optimizer()->set_clip_grad(kClipGrad);
  return c;
}

}  // namespace

TEST_CASE("one optimizer shard decides its own update: the coordinator's decision, bit for bit") {
  ScratchDir dir("update-decision");
  const Config shard_decides = one_rank(dir, "shard");
  Config guarded = one_rank(dir, "coordinator");
  guarded.mutable_logging()->set_on_spike(LoggingConfig::SKIP_UPDATE);

  const auto by_shard = run(shard_decides);
  const auto by_coordinator = run(guarded);
  check_bitwise(by_shard, by_coordinator);
  REQUIRE(by_shard.outcome.steps.size() == 6);
  REQUIRE(by_coordinator.outcome.steps.size() == 6);
  int clipped = 0;
  for (size_t i = 0; i < 6; ++i) {
    CAPTURE(i);
    const auto& a = by_shard.outcome.steps[i];
    const auto& b = by_coordinator.outcome.steps[i];
    CHECK(a.loss == b.loss);
    CHECK(a.grad_norm == b.grad_norm);
    CHECK(a.lr == b.lr);
    CHECK(a.clipped == b.clipped);
    CHECK_FALSE(a.skipped);
    CHECK_FALSE(b.skipped);
    clipped += a.clipped;
  }
  CHECK(clipped > 0);
  CHECK(clipped < 6);

  Reference ref(shard_decides, 6);
  compare(by_shard, ref);
}

TEST_CASE("one optimizer shard skips a non-finite update itself and holds the LR") {
  ScratchDir dir("update-decision-nan");
  Config c = one_rank(dir, "run");
  c.mutable_checkpoint()->set_interval_steps(0);
  auto* f = c.mutable_faults()->add_fault();
  f->set_actor("stage/dp0/pp0/tp0");
  f->set_step(2);
  f->set_phase(Fault::BACKWARD);
  f->set_kind(Fault::NAN_GRADIENT);
  f->set_microbatch(3);
  const auto r = run(c);
  REQUIRE(r.outcome.steps.size() == 6);
  CHECK_FALSE(r.outcome.steps[0].skipped);
  CHECK(r.outcome.steps[1].skipped);
  CHECK_FALSE(std::isfinite(r.outcome.steps[1].grad_norm));
  CHECK_FALSE(r.outcome.steps[2].skipped);
  // Step 3, handed out ahead with step 2's decision, runs at the LR step 2 would have.
  CHECK(r.outcome.steps[2].lr == r.outcome.steps[1].lr);
  CHECK(r.state->adam_steps == 5);
}

TEST_CASE("an optimizer shard told to decide applies its own decision and waits for no UpdateCommand") {
  // The optimizer actor alone, with this test standing in for its coordinator and stage.
  Config c = with_steps(parity_layout(1, 1, "unused"), 1);
  c.mutable_optimizer()->set_clip_grad(kClipGrad);
  const engine::Rank rank{0, 0, 0};
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor coordinator{sys}, stage{sys};
  auto directory = std::make_shared<actors::Directory>();
  const auto registry = std::make_shared<const model::ParameterRegistry>(engine::stage_registry(c, rank));
  const auto device = engine::make_rank_device(c, engine::Topology::logical(c), rank);
  auto parent = sys.spawn([&](caf::event_based_actor* self) -> caf::behavior {
    return {[=](actors::start_atom) {
      return actors::untyped_handle(
          actors::spawn_optimizer(self, actors::OptimizerArgs{actors::OptimizerConfig::of(c), registry, rank, nullptr,
                                                                  nullptr, directory, device, nullptr}));
    }};
  });
  caf::actor optimizer;
  coordinator->request(parent, caf::infinite, actors::start_atom::value)
      .receive([&](caf::actor a) { optimizer = a; }, [&](caf::error& e) { FAIL(sys.render(e)); });
  const actors::Registry peers{{engine::coordinator_path(), caf::actor_cast<caf::actor>(coordinator)},
                               {engine::stage_path(rank), caf::actor_cast<caf::actor>(stage)}};
  coordinator->request(optimizer, caf::infinite, actors::wire_atom::value, peers)
      .receive([](actors::wired_atom) {}, [&](caf::error& e) { FAIL(sys.render(e)); });
  const auto total = engine::stage_registry(c, rank).total();
  const auto n = static_cast<size_t>(total);
  std::vector<float> params(n), grads(n, 0.5f);  // norm 0.5 sqrt(n), far above the clip
  for (size_t i = 0; i < n; ++i) params[i] = float(i % 97) * 1e-3f;
  const auto before = params;
  const double lr = 1e-3;
  double partial = -1;
  auto take_partial = [&] {
    coordinator->receive([&](const msg::NormPartial& p) {
      CHECK(p.step == 1);
      partial = p.sum_squares;
    });
  };
  std::optional<msg::ShardApplied> applied;
  auto take_applied = [&](std::chrono::milliseconds wait) {
    stage->receive([&](const msg::ShardApplied& a) { applied = a; }, caf::after(wait) >> [] {});
  };

  SUBCASE("the shard decides") {
    stage->send(optimizer, msg::GradShardReady{1, grads.data(), params.data(), 0, total, nullptr,
                                               msg::UpdateRule{true, lr, kClipGrad}});
    take_partial();
    take_applied(std::chrono::seconds(30));
    REQUIRE(applied);
    const auto d = optim::decide(partial, kClipGrad);
    CHECK(d.clipped);
    CHECK(applied->applied.step == 1);
    CHECK(applied->applied.lr == lr);
    CHECK(applied->applied.clip_factor == d.factor);
    CHECK_FALSE(applied->applied.skip);
    CHECK(applied->sums.update_sum_squares > 0);
    CHECK(params != before);
  }
  SUBCASE("the coordinator decides") {
    stage->send(optimizer, msg::GradShardReady{1, grads.data(), params.data(), 0, total, nullptr, {}});
    take_partial();
    take_applied(std::chrono::milliseconds(200));
    CHECK_FALSE(applied);  // nothing is applied before the UpdateCommand
    CHECK(params == before);
    coordinator->send(optimizer, msg::UpdateCommand{1, lr, 0.25, false});
    take_applied(std::chrono::seconds(30));
    REQUIRE(applied);
    CHECK(applied->applied.lr == lr);
    CHECK(applied->applied.clip_factor == 0.25);
    CHECK(params != before);
  }
  caf::anon_send_exit(optimizer, caf::exit_reason::user_shutdown);
}

// A coordinator slower than a step to send a save's SnapshotCommand: the copies must
// still be of the saved step. Before the fix the shard applied step 3's update first and
// the checkpoint of step 2 held step 3's weights (now the shard would refuse that
// snapshot and its group restart).
TEST_CASE("a coordinator late with a save's copies: the shard still copies the saved step") {
  ScratchDir dir("update-decision-late-save");
  const Config plain = one_rank(dir, "plain");
  Config late = one_rank(dir, "late");
  for (int step : {2, 4}) {
    auto* f = late.mutable_faults()->add_fault();
    f->set_actor("coordinator");
    f->set_step(step);
    f->set_phase(Fault::CHECKPOINT_WRITE);
    f->set_kind(Fault::DELAY);
    f->set_delay_s(0.05);  // tiny's steps take a few ms: the next step's backward is long over
  }
  const auto want = run(plain);
  const auto got = run(late);
  CHECK(got.restarts == 0);
  CHECK(got.failures.empty());
  check_bitwise(got, want);
  // Resumed from the late checkpoint of step 2: steps 3-6 bitwise those of the run.
  Config resumed = one_rank(dir, "resumed");
  resumed.mutable_checkpoint()->set_load(engine::checkpoint_root(late) + "/" + ckpt::step_dir_name(2));
  check_bitwise(run(resumed), want, 2);
}

