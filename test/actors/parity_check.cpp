#include "test/actors/parity_check.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>

#include "config/derived.h"
#include "data/batch_source.h"
#include "test/support/tiny_runtime_config.h"

namespace troupe::testing {

Config parity_layout(int dp, int pp, const std::string& run_dir) {
  Config c = tiny_runtime_config(4, dp, pp);
  auto* p = c.mutable_parallel();
  p->set_schedule(ParallelConfig::ONE_F_ONE_B);
  p->set_distributed_optimizer(true);
  // Update 1 applies the warmup's start (the schedule at 0 samples): not 0, so that a
  // one-update parity check compares weights that moved.
  c.mutable_optimizer()->set_warmup_init(1e-4);
  c.mutable_logging()->set_run_dir((std::filesystem::temp_directory_path() / run_dir).string());
  c.mutable_supervision()->set_max_restarts(0);
  c.mutable_checkpoint()->set_save_on_exit(false);
  return c;
}

Config with_steps(Config c, int steps) {
  c.mutable_training()->set_train_samples(int64_t(steps) * c.batch().global_batch_size());
  return c;
}

actors::RunResult run(const Config& c) {
  actors::RunOptions o;
  o.console = false;
  o.collect_state = true;
  o.timeout = std::chrono::seconds(120);
  auto r = actors::run_training(c, o);
  REQUIRE_MESSAGE(r.outcome.status == "completed", r.outcome.error);
  REQUIRE(r.state.has_value());
  return r;
}

std::vector<data::Microbatch> global_batch(const Config& c, const data::BatchSource& src, int step) {
  const int m = int(config::microbatches_per_replica(c));
  std::vector<data::Microbatch> mbs;
  for (int d = 0; d < c.parallel().data(); ++d)
    for (int j = 0; j < m; ++j) mbs.push_back(src.microbatch(int64_t(step) * c.batch().global_batch_size(), d, j));
  return mbs;
}

Reference::Reference(const Config& c, int steps) : trainer(c, device) {
  const auto src = data::BatchSource::open(c);
  for (int s = 0; s < steps; ++s) reports.push_back(trainer.step(global_batch(c, src, s)));
}

double max_abs(const float* a, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, double(std::fabs(a[i])));
  return m;
}

double max_diff(const float* a, const float* b, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, double(std::fabs(a[i] - b[i])));
  return m;
}

void compare(const actors::RunResult& r, Reference& ref) {
  REQUIRE(r.outcome.steps.size() == ref.reports.size());
  for (size_t s = 0; s < ref.reports.size(); ++s) {
    CAPTURE(s);
    const auto& got = r.outcome.steps[s];
    const auto& want = ref.reports[s];
    CHECK(got.loss_tokens == want.loss_tokens);
    CHECK(std::fabs(got.loss - want.loss) <= kLossRel * std::fabs(want.loss));
    // The norm counts every parameter once (tied copies and TP replicas left out).
    CHECK(std::fabs(got.grad_norm - want.grad_norm) <= kLossRel * want.grad_norm);
    CHECK(got.lr == want.lr);
    CHECK(got.clipped == want.clipped);
    CHECK(got.skipped == want.skipped);
  }
  auto& model = ref.trainer.model();
  auto& adam = ref.trainer.optimizer();
  const auto& state = *r.state;
  CHECK(state.adam_steps == adam.steps());
  CHECK(state.params.size() == model.registry().tensors().size());
  for (const auto& t : model.registry().tensors()) {
    CAPTURE(t.name);
    const size_t n = size_t(t.numel);
    REQUIRE(state.params.at(t.name).size() == n);
    CHECK(max_diff(state.params.at(t.name).data(), model.params() + t.offset, n) <= kParamAbs);
    const float* m = adam.m() + t.offset;
    const float* v = adam.v() + t.offset;
    CHECK(max_diff(state.exp_avg.at(t.name).data(), m, n) <= kMomentRel * max_abs(m, n));
    CHECK(max_diff(state.exp_avg_sq.at(t.name).data(), v, n) <= kMomentRel * max_abs(v, n));
  }
}

void check_same_state(const actors::RunResult& got, const actors::RunResult& want) {
  REQUIRE(got.state);
  REQUIRE(want.state);
  check_same_state(*got.state, *want.state);
}

void check_bitwise(const actors::RunResult& got, const actors::RunResult& want, size_t first) {
  REQUIRE(got.outcome.steps.size() + first == want.outcome.steps.size());
  for (size_t s = 0; s < got.outcome.steps.size(); ++s) {
    CAPTURE(s);
    CHECK(got.outcome.steps[s].step == want.outcome.steps[s + first].step);
    CHECK(got.outcome.steps[s].loss == want.outcome.steps[s + first].loss);
    CHECK(got.outcome.steps[s].grad_norm == want.outcome.steps[s + first].grad_norm);
  }
  check_same_state(got, want);
}

void check_layout(const Config& c) {
  for (int steps : {1, 3}) {
    CAPTURE(steps);
    const Config cs = with_steps(c, steps);
    Reference ref(cs, steps);
    compare(run(cs), ref);
  }
}

}  // namespace troupe::testing
