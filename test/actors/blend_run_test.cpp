// A run over a blend of datasets (data.blend, docs/data.md "Blends") through the actor
// runtime: what every step record, metrics.jsonl and the checkpoint manifest say of each
// dataset, and a resume, on another placement of the logical layout, that continues the
// blend bitwise.
//
// What must hold, fixed before any run (bitwise, nothing looser):
//   - each step's per-dataset samples are the blend rule's choices for the step's
//     positions, they add up to the global batch, and their non-padding tokens add up
//     to the step's; the running counts are the sums of the steps';
//   - the manifest of a checkpoint after step s holds step s's running counts;
//   - DP2 x PP2 resumed from step 2 on one physical replica gives the uninterrupted
//     run's steps 3 and 4 (losses, norms, LR, counts, per-dataset records) and its
//     final parameters and Adam state exactly.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "actors/runtime.h"
#include "ckpt/manifest.h"
#include "data/blend.h"
#include "data/indexed_dataset.h"
#include "data/random.h"
#include "test/actors/parity_check.h"
#include "test/support/same_state.h"
#include "test/support/scratch_dir.h"

using namespace troupe;
using namespace troupe::testing;
namespace fs = std::filesystem;

namespace {

// `n` byte-token documents of 20..120 tokens drawn from [first, first + 80), then EOD.
void write_bytes_dataset(const std::string& prefix, int n, int first, uint64_t seed) {
  data::IndexedDatasetWriter w(prefix, data::dtype_for_vocab(257), 257);
  data::SplitMix64 rng(seed);
  for (int d = 0; d < n; ++d) {
    std::vector<int32_t> doc;
    const int len = 20 + int(rng.below(100));
    for (int k = 0; k < len; ++k) doc.push_back(first + int(rng.below(80)));
    doc.push_back(256);
    w.add_document(doc);
  }
  w.finish();
}

Config blend_run(const ScratchDir& dir, const std::string& name, int steps, int physical) {
  Config c = with_steps(parity_layout(2, 2, dir / name), steps);
  c.mutable_parallel()->set_physical_replicas(physical);
  c.mutable_data()->clear_prefix();
  c.mutable_data()->set_split("80,20,0");
  c.mutable_training()->set_eval_samples(16);
  c.mutable_training()->set_eval_interval(2);
  for (const auto& [w, ds] : {std::pair{0.3, "web"}, {0.5, "code"}, {0.2, "books"}}) {
    auto* e = c.mutable_data()->add_blend();
    e->set_weight(w);
    e->set_prefix(dir / ds);
  }
  c.mutable_checkpoint()->set_dir(dir / (name + "-ckpt"));
  return c;
}

}  // namespace

TEST_CASE("a blend of three datasets under DP2 x PP2: per-dataset counts everywhere; a resume on another placement "
          "continues bitwise") {
  const ScratchDir dir("blend-run");
  write_bytes_dataset(dir / "web", 200, 0, 1);
  write_bytes_dataset(dir / "code", 120, 90, 2);
  write_bytes_dataset(dir / "books", 60, 170, 3);

  const auto straight = run(blend_run(dir, "straight", 4, 2));
  REQUIRE(straight.outcome.steps.size() == 4);
  const data::BlendOrder rule({0.3, 0.5, 0.2});
  int64_t tokens[3] = {0, 0, 0};
  for (const auto& r : straight.outcome.steps) {
    CAPTURE(r.step);
    REQUIRE(r.datasets.size() == 3);
    const auto before = rule.taken_before(r.consumed_samples - 8), after = rule.taken_before(r.consumed_samples);
    int64_t samples = 0, step_tokens = 0;
    for (size_t d = 0; d < 3; ++d) {
      const auto& x = r.datasets[d];
      CHECK(x.prefix == dir / (d == 0 ? "web" : d == 1 ? "code" : "books"));
      CHECK(x.samples == after[d] - before[d]);
      CHECK(x.consumed_samples == after[d]);
      tokens[d] += x.tokens;
      CHECK(x.consumed_tokens == tokens[d]);
      samples += x.samples;
      step_tokens += x.tokens;
    }
    CHECK(samples == 8);
    CHECK(step_tokens == r.input_tokens - r.padding_tokens);
  }
  // Each evaluation: the blend's validation set, each dataset's loss over its part.
  REQUIRE(straight.outcome.evals.size() >= 2);
  for (const auto& e : straight.outcome.evals) {
    REQUIRE(e.datasets.size() == 3);
    int64_t samples = 0, loss_tokens = 0;
    double weighted = 0;
    for (const auto& x : e.datasets) {
      CHECK(x.loss > 0);
      samples += x.samples;
      loss_tokens += x.loss_tokens;
      weighted += x.loss * double(x.loss_tokens);
    }
    CHECK(samples == 16);
    CHECK(loss_tokens == e.loss_tokens);
    // The datasets' sums regroup the blend's: equal to rounding.
    CHECK(weighted / double(loss_tokens) == doctest::Approx(e.loss).epsilon(1e-12));
  }
  // metrics.jsonl carries the same records.
  std::ifstream jsonl(dir / "straight/metrics.jsonl");
  int with_datasets = 0;
  for (std::string line; std::getline(jsonl, line);)
    with_datasets += line.find("\"type\":\"step\"") != std::string::npos && line.find("\"datasets\":[") != std::string::npos;
  CHECK(with_datasets == 4);

  // Two steps on two physical replicas, saved; two more on one.
  Config a = blend_run(dir, "first", 2, 2);
  a.mutable_checkpoint()->set_save_on_exit(true);
  run(a);
  const auto manifest = ckpt::read_manifest(dir / "first-ckpt/step_00000002");
  REQUIRE(manifest.data_position().datasets_size() == 3);
  for (int d = 0; d < 3; ++d) {
    CHECK(manifest.data_position().datasets(d).prefix() == straight.outcome.steps[1].datasets[size_t(d)].prefix);
    CHECK(manifest.data_position().datasets(d).consumed_samples() ==
          straight.outcome.steps[1].datasets[size_t(d)].consumed_samples);
    CHECK(manifest.data_position().datasets(d).consumed_tokens() ==
          straight.outcome.steps[1].datasets[size_t(d)].consumed_tokens);
  }
  Config b = blend_run(dir, "second", 4, 1);
  b.mutable_checkpoint()->set_dir(a.checkpoint().dir());
  b.mutable_checkpoint()->set_load("latest");
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
    CHECK(got.samples_hash == want.samples_hash);
    REQUIRE(got.datasets.size() == 3);
    for (size_t d = 0; d < 3; ++d) {
      CHECK(got.datasets[d].samples == want.datasets[d].samples);
      CHECK(got.datasets[d].tokens == want.datasets[d].tokens);
      CHECK(got.datasets[d].consumed_samples == want.datasets[d].consumed_samples);
      CHECK(got.datasets[d].consumed_tokens == want.datasets[d].consumed_tokens);
    }
  }
  // The resumed run's evaluations are the uninterrupted run's, per dataset too.
  REQUIRE(!resumed.outcome.evals.empty());
  const auto& got = resumed.outcome.evals.back();
  const auto& want = straight.outcome.evals.back();
  CHECK(got.step == want.step);
  CHECK(got.loss == want.loss);
  for (size_t d = 0; d < 3; ++d) CHECK(got.datasets[d].loss == want.datasets[d].loss);
  check_same_state(*resumed.state, *straight.state);
}
