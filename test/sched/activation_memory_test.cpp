// The planner's activation term and `supervisor plan --gpu-memory` on the seed's 500B
// config (docs/planner.md, "Activation memory"). The figures are the formula of
// sched/activation_memory.h; test/model/memory_test.cpp checks that formula against
// the bytes a stage's device really holds on small configs.
#include <doctest/doctest.h>

#include <stdexcept>
#include <string>

#include "config/text_format.h"
#include "sched/activation_memory.h"
#include "sched/planner_report.h"

using namespace troupe;
using namespace troupe::sched;

namespace {

Config seed_config() {
  return config::load_config_file(std::string(TROUPE_SOURCE_DIR) + "/configs/seed-500b.textproto");
}

}  // namespace

TEST_CASE("activation plan: in-flight counts and slots come from the schedule") {
  Config c = seed_config();  // PP8, 24 microbatches
  const auto one_f = activation_plan(c);
  REQUIRE(one_f.size() == 8);
  for (int k = 0; k < 8; ++k) {
    CAPTURE(k);
    CHECK(one_f[size_t(k)].in_flight == 8 - k);  // 1F1B: p - k
    CHECK(one_f[size_t(k)].slots == 9 - k);      // one more for the pointer hand-off
    CHECK(one_f[size_t(k)].layers == 11);
  }
  c.mutable_parallel()->set_schedule(ParallelConfig::GPIPE);
  for (const auto& s : activation_plan(c)) {
    CHECK(s.in_flight == 24);  // GPipe: m
    CHECK(s.slots == 24);
  }
}

// The seed's layer under sequence parallelism (TP8, n = 8,192 tokens, r = 1,024
// rows, D = 21,504): 2 n D + r D = 374,341,632; LayerNorm statistics 4 r = 4,096;
// qkv n 3 D/8 = 66,060,288, output n D/8 = 22,020,096, probabilities 21 heads x
// 8,192^2 = 1,409,286,144; MLP 2 n 11,040 = 180,879,360: 2,052,591,616 floats.
TEST_CASE("activation plan: one seed layer worked by hand") {
  const auto plan = activation_plan(seed_config());
  CHECK(plan[0].layer_bytes == 4 * int64_t(2052591616));
  Config sel = seed_config();
  sel.mutable_model()->set_recompute(ModelConfig::SELECTIVE);
  // SELECTIVE drops the probabilities and one of the MLP's two n Ft.
  CHECK(activation_plan(sel)[0].layer_bytes == 4 * (int64_t(2052591616) - 1409286144 - 90439680));
}

TEST_CASE("plan --gpu-memory 141GB on the seed's 500B config: the least recomputation per stage") {
  const Config c = seed_config();
  const auto fits = fit_recompute(c, parse_memory_size("141GB"));
  REQUIRE(fits.size() == 8);
  // Main state 7,812,533,376 parameters x (8 + 8/80) bytes = 63.28 GB on every stage.
  CHECK(fits[0].main_state_bytes == doctest::Approx(63.2815e9).epsilon(1e-5));
  struct Want {
    ModelConfig::Recompute mode;
    int layers;
  };
  // Stage k holds 9 - k slots: the first stages need every layer recomputed, the last
  // (2 slots, but the logits) gets by with SELECTIVE.
  const Want want[8] = {{ModelConfig::FULL, 11}, {ModelConfig::FULL, 11}, {ModelConfig::FULL, 11},
                        {ModelConfig::FULL, 10}, {ModelConfig::FULL, 10}, {ModelConfig::FULL, 10},
                        {ModelConfig::FULL, 9},  {ModelConfig::SELECTIVE, 0}};
  for (int k = 0; k < 8; ++k) {
    CAPTURE(k);
    CHECK(fits[size_t(k)].fits);
    CHECK(fits[size_t(k)].choice.mode == want[k].mode);
    CHECK(fits[size_t(k)].choice.layers == want[k].layers);
    CHECK(fits[size_t(k)].total_bytes <= 141e9);
  }
  const std::string text = render_memory_fit(c, 141e9);
  CAPTURE(text);
  CHECK(text.find("full (uniform)") != std::string::npos);
  CHECK(text.find("full 10 of 11 (block)") != std::string::npos);
  CHECK(text.find("8 of 8 stages fit") != std::string::npos);
}

TEST_CASE("plan --gpu-memory: below the main state nothing fits, and it says so") {
  const Config c = seed_config();
  for (const auto& f : fit_recompute(c, 60e9)) CHECK_FALSE(f.fits);
  const std::string text = render_memory_fit(c, 60e9);
  CHECK(text.find("none fits") != std::string::npos);
  CHECK(text.find("0 of 8 stages fit") != std::string::npos);
}

TEST_CASE("memory sizes: decimal and binary units, one clear error otherwise") {
  CHECK(parse_memory_size("141GB") == 141e9);
  CHECK(parse_memory_size("141 GB") == 141e9);
  CHECK(parse_memory_size("80GiB") == 80.0 * 1024 * 1024 * 1024);
  CHECK(parse_memory_size("1.5e11") == 1.5e11);
  CHECK_THROWS_WITH_AS(parse_memory_size("141XB"), doctest::Contains("unknown unit"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(parse_memory_size("lots"), doctest::Contains("'lots'"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(parse_memory_size("-3GB"), doctest::Contains("not positive"), std::invalid_argument);
}
