// One logical layout on several placements (parallel.physical_replicas, docs/layout.md):
// physical replicas that host several logical ones compute them in turn on one shared
// stage, and the data-parallel sums go through the ordered reduction.
//
// What must hold, fixed before any run: bitwise, nothing looser.
//   - every step record's numbers (loss, loss tokens, gradient norm, LR, clip and skip,
//     consumed samples, the samples' hash), every evaluation loss, the final parameters
//     and both Adam moments (and the Adam step) equal across placements of one logical
//     layout: GPT-2 with dropout 0.1 and evaluation, a Llama with full recomputation,
//     interleaved 1F1B, DP2 x TP2 x PP2;
//   - a checkpoint written on one placement resumes on another bitwise equal to the run
//     that never stopped, both directions;
//   - a placement offered on a checkpoint of another logical layout is refused before
//     anything is written;
//   - the memory a worker hosting k replicas reports is the figure docs/layout.md states:
//     weights W, gradients W plus the accumulator of the shards it owns (k / data of W
//     when k > 1), Adam moments of its k shards, one replica's activation slots.
#include <doctest/doctest.h>

#include <filesystem>
#include <stdexcept>
#include <string>

#include "actors/runtime.h"
#include "comm/communicator.h"
#include "ckpt/reader.h"
#include "config/error.h"
#include "engine/checkpointing.h"
#include "engine/run_state.h"
#include "engine/stage_worker.h"
#include "test/actors/parity_check.h"
#include "test/support/fault.h"
#include "test/support/same_state.h"
#include "test/support/tiny_runtime_config.h"

using namespace troupe;
using namespace troupe::testing;
namespace fs = std::filesystem;

namespace {

Config placed(Config c, int physical) {
  c.mutable_parallel()->set_physical_replicas(physical);
  c.mutable_logging()->set_run_dir(c.logging().run_dir() + "-on" + std::to_string(physical));
  c.mutable_checkpoint()->set_dir("");
  return c;
}

// Every number two runs of one logical layout must share.
void check_same_run(const actors::RunResult& got, const actors::RunResult& want) {
  REQUIRE(got.outcome.steps.size() == want.outcome.steps.size());
  for (size_t s = 0; s < got.outcome.steps.size(); ++s) {
    CAPTURE(s);
    const auto& a = got.outcome.steps[s];
    const auto& b = want.outcome.steps[s];
    CHECK(a.step == b.step);
    CHECK(a.consumed_samples == b.consumed_samples);
    CHECK(a.loss == b.loss);
    CHECK(a.loss_tokens == b.loss_tokens);
    CHECK(a.padding_tokens == b.padding_tokens);
    CHECK(a.grad_norm == b.grad_norm);
    CHECK(a.lr == b.lr);
    CHECK(a.clipped == b.clipped);
    CHECK(a.skipped == b.skipped);
    CHECK(a.samples_hash == b.samples_hash);
  }
  REQUIRE(got.outcome.evals.size() == want.outcome.evals.size());
  for (size_t i = 0; i < got.outcome.evals.size(); ++i) {
    CAPTURE(i);
    CHECK(got.outcome.evals[i].loss == want.outcome.evals[i].loss);
  }
  REQUIRE(got.state.has_value());
  REQUIRE(want.state.has_value());
  check_same_state(*got.state, *want.state);
}

// `c` on each placement, against the first (one physical replica per logical one).
void check_placements(const Config& c, std::initializer_list<int> physicals) {
  const auto want = run(placed(c, c.parallel().data()));
  for (const int p : physicals) {
    CAPTURE(p);
    check_same_run(run(placed(c, p)), want);
  }
}

}  // namespace

TEST_CASE("logical DP4 x PP2, GPT-2 with dropout 0.1 and evaluation: bitwise on 4, 2 and 1 physical replicas") {
  Config c = with_steps(parity_layout(4, 2, "troupe-placement-gpt2"), 3);
  c.mutable_model()->set_hidden_dropout(0.1f);
  c.mutable_model()->set_attention_dropout(0.1f);
  c.mutable_training()->set_eval_interval(2);
  c.mutable_training()->set_eval_samples(16);
  check_placements(c, {2, 1});
}

TEST_CASE("logical DP4 x PP2, a Llama with FULL recomputation: bitwise on 4, 2 and 1 physical replicas") {
  Config c = as_llama(with_steps(parity_layout(4, 2, "troupe-placement-llama"), 3));
  c.mutable_model()->set_recompute(ModelConfig::FULL);
  c.mutable_model()->set_recompute_method(ModelConfig::UNIFORM);
  c.mutable_model()->set_recompute_num_layers(1);
  check_placements(c, {2, 1});
}

TEST_CASE("logical DP4 x PP2 under interleaved 1F1B (2 chunks a stage): bitwise on 4, 2 and 1 physical replicas") {
  Config c = with_steps(parity_layout(4, 2, "troupe-placement-interleaved"), 2);
  c.mutable_parallel()->set_schedule(ParallelConfig::INTERLEAVED_1F1B);
  c.mutable_parallel()->set_virtual_stages(2);
  c.mutable_training()->set_eval_interval(2);
  c.mutable_training()->set_eval_samples(8);
  check_placements(c, {2, 1});
}

TEST_CASE("logical DP2 x TP2 x PP2, GPT-2 and Llama: bitwise on 2 and 1 physical replicas") {
  for (const bool llama : {false, true}) {
    CAPTURE(llama);
    Config c = with_steps(parity_layout(2, 2, std::string("troupe-placement-tp2-") + (llama ? "llama" : "gpt2")), 2);
    c.mutable_parallel()->set_tensor(2);
    c.mutable_parallel()->set_sequence_parallel(true);
    if (llama) c = as_llama(c);
    check_placements(c, {1});
  }
}

TEST_CASE("a checkpoint written on one placement resumes on another bitwise equal to the uninterrupted run") {
  // Logical DP4 x PP2: 4 steps straight, against 2 steps, a save, and 2 more on another
  // placement, for every pair of 4, 2 and 1 physical replicas.
  const Config base = parity_layout(4, 2, "troupe-placement-resume");
  const auto straight = run(placed(with_steps(base, 4), 4));
  for (const auto& [first, second] : {std::pair{4, 1}, std::pair{1, 4}, std::pair{2, 1}, std::pair{1, 2},
                                      std::pair{4, 2}, std::pair{2, 4}}) {
    CAPTURE(first);
    CAPTURE(second);
    const std::string name = "troupe-placement-resume-" + std::to_string(first) + "-" + std::to_string(second);
    Config a = placed(with_steps(base, 2), first);
    a.mutable_logging()->set_run_dir((fs::temp_directory_path() / name).string());
    a.mutable_checkpoint()->set_dir((fs::temp_directory_path() / (name + "-ckpt")).string());
    a.mutable_checkpoint()->set_interval_steps(0);
    a.mutable_checkpoint()->set_save_on_exit(true);
    fs::remove_all(a.checkpoint().dir());
    run(a);
    Config b = placed(with_steps(base, 4), second);
    b.mutable_logging()->set_run_dir((fs::temp_directory_path() / (name + "-2")).string());
    b.mutable_checkpoint()->set_dir(a.checkpoint().dir());
    b.mutable_checkpoint()->set_load("latest");
    b.mutable_checkpoint()->set_save_on_exit(false);
    const auto resumed = run(b);
    REQUIRE(resumed.outcome.steps.size() == 2);
    for (size_t s = 0; s < 2; ++s) {
      CAPTURE(s);
      const auto& got = resumed.outcome.steps[s];
      const auto& want = straight.outcome.steps[s + 2];
      CHECK(got.step == want.step);
      CHECK(got.loss == want.loss);
      CHECK(got.grad_norm == want.grad_norm);
      CHECK(got.lr == want.lr);
      CHECK(got.consumed_samples == want.consumed_samples);
    }
    check_same_state(*resumed.state, *straight.state);
  }
}

TEST_CASE("a killed hosted rank restarts the group from the checkpoint; the run ends bitwise the fault-free one") {
  // Logical DP4 x PP2 on 2 physical replicas, a checkpoint every 2 steps: a stage of a
  // later turn (dp3) killed in its backward, an optimizer shard of a first turn (dp0)
  // killed in its update, and a stage killed while its turn waits (dp2's forward).
  Config c = placed(with_steps(parity_layout(4, 2, "troupe-placement-recovery"), 5), 2);
  c.mutable_supervision()->set_max_restarts(3);
  c.mutable_checkpoint()->set_interval_steps(2);
  const auto clean = run(c);
  for (const auto& f : {fault("stage/dp3/pp1/tp0", 3, Fault::BACKWARD), fault("optim/dp0/pp0/tp0", 4, Fault::OPTIMIZER),
                        fault("stage/dp2/pp0/tp0", 3, Fault::FORWARD)}) {
    CAPTURE(f.actor());
    Config k = c;
    k.mutable_logging()->set_run_dir(c.logging().run_dir() + "-" + std::to_string(f.step()) + "-" +
                                     Fault::Phase_Name(f.phase()));
    *k.mutable_faults()->add_fault() = f;
    const auto r = run(k);
    CHECK(r.restarts == 1);
    check_same_run(r, clean);
  }
}

TEST_CASE("a placement offered on a checkpoint of another logical layout is refused before anything is written") {
  Config a = with_steps(parity_layout(2, 2, "troupe-placement-other-layout"), 1);
  a.mutable_checkpoint()->set_dir((fs::temp_directory_path() / "troupe-placement-other-layout-ckpt").string());
  a.mutable_checkpoint()->set_save_on_exit(true);
  fs::remove_all(a.checkpoint().dir());
  run(a);
  Config b = placed(with_steps(parity_layout(4, 2, "troupe-placement-other-layout-2"), 2), 2);
  b.mutable_checkpoint()->set_dir(a.checkpoint().dir());
  b.mutable_checkpoint()->set_load("latest");
  fs::remove_all(b.logging().run_dir());
  actors::RunOptions o;
  o.console = false;
  try {
    actors::run_training(b, o);
    FAIL("the start was not refused");
  } catch (const config::ConfigError& e) {
    const std::string what = e.what();
    CAPTURE(what);
    CHECK(what.find("parallel.physical_replicas: 2 physical replicas place the logical layout data 4 x pipeline 2 x "
                    "tensor 1, but the checkpoint") != std::string::npos);
    CHECK(what.find("written under the logical layout data 2 x pipeline 2 x tensor 1") != std::string::npos);
  }
  CHECK_FALSE(fs::exists(b.logging().run_dir()));
  // Without a placement the same resume reshards (within fp32 tolerance: the recovery
  // suite's resharded resume), and starts.
  Config c = b;
  c.mutable_parallel()->set_physical_replicas(0);
  CHECK_NOTHROW(engine::check_resume_layout(c, engine::RunState::of(c).topology(c), ckpt::open_step(a.checkpoint().dir(), 1)));
}

TEST_CASE("the memory of a worker hosting 1, 2 and 4 replicas is the figure docs/layout.md states") {
  // Logical DP4 x PP2; the stage of pp0 on physical replica 0 reports its device's peak.
  const Config base = with_steps(parity_layout(4, 2, "troupe-placement-memory"), 1);
  const int32_t L = 4;
  const auto n = size_t(engine::stage_registry(base, {0, 0, 0}).total());
  int64_t activations = -1, scratch = -1;
  for (const int physical : {4, 2, 1}) {
    CAPTURE(physical);
    const int32_t k = L / physical;
    const auto r = run(placed(base, physical));
    REQUIRE(r.outcome.steps.size() == 1);
    const metrics::StageMemoryRecord* m = nullptr;
    for (const auto& s : r.outcome.steps[0].stage_memory)
      if (s.stage == "stage/dp0/pp0/tp0") m = &s;
    REQUIRE(m != nullptr);
    // Physical replica 0 hosts logical 0, physical, 2 physical, ...: their shards.
    int64_t owned = 0;
    for (int32_t d = 0; d < L; d += physical) owned += int64_t(comm::chunk_range(n, L, d).size());
    CHECK(m->weights == int64_t(n * sizeof(float)));
    CHECK(m->gradients == int64_t(n * sizeof(float)) + (k > 1 ? owned * int64_t(sizeof(float)) : 0));
    CHECK(m->optimizer_state == 2 * owned * int64_t(sizeof(float)));
    // One replica's activation slots whatever it hosts; the scratch of one replica plus
    // each further hosted optimizer shard's host read-back of its norm parts (a double
    // per part and per layer part: bytes, not buffers of the model's size).
    if (activations < 0) activations = m->activations, scratch = m->scratch;
    CHECK(m->activations == activations);
    CHECK(m->activations == m->planned_activations);
    CHECK(m->scratch >= scratch);
    CHECK(m->scratch - scratch <= (k - 1) * 1024);
  }
}
