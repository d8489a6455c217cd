// The planner against every reference number (docs/planner.md), computed from
// configs/seed-500b.textproto, and the two routes to that config printing one plan.
#include <doctest/doctest.h>

#include <fmt/format.h>

#include <cctype>
#include <stdexcept>
#include <string>

#include "config/derived.h"
#include "config/megatron_args.h"
#include "config/text_format.h"
#include "config/validate.h"
#include "sched/failure_calendar.h"
#include "sched/pipeline_schedule.h"
#include "sched/planner.h"
#include "sched/planner_report.h"
#include "test/config/util.h"

using namespace troupe;
using namespace troupe::sched;

namespace {

std::string source(const std::string& relative) {
  return std::string(TROUPE_SOURCE_DIR) + "/" + relative;
}

const Config& seed() {
  static const Config c = config::load_config_file(source("configs/seed-500b.textproto"));
  return c;
}

std::string pct(double f) { return fmt::format("{:.1f}%", 100 * f); }
std::string gb(double bytes) { return fmt::format("{:.2f}", bytes / 1e9); }
std::string fixed2(double v) { return fmt::format("{:.2f}", v); }

bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos;
}

}  // namespace

TEST_CASE("sequences and tokens per update: 1,920 / 15,728,640") {
  CHECK(config::microbatches_per_replica(seed()) == 24);
  CHECK(seed().batch().global_batch_size() == 1 * 24 * 80);
  CHECK(config::tokens_per_update(seed()) == 15728640);
  CHECK(group_digits(config::tokens_per_update(seed())) == "15,728,640");
}

TEST_CASE("ideal pipeline idle at p=8, m=12/24/48: 36.8% / 22.6% / 12.7%") {
  CHECK(pct(ideal_idle_fraction(8, 12)) == "36.8%");
  CHECK(pct(ideal_idle_fraction(8, 24)) == "22.6%");
  CHECK(pct(ideal_idle_fraction(8, 48)) == "12.7%");
  CHECK(ideal_idle_fraction(8, 24) == doctest::Approx(7.0 / 31.0));
  CHECK(layout_for(seed(), 80).pipeline_idle == doctest::Approx(7.0 / 31.0));
}

TEST_CASE("causal position pairs at 4,096 / 8,192: 8,390,656 / 33,558,528") {
  CHECK(causal_pairs(4096) == 8390656);
  CHECK(causal_pairs(8192) == 33558528);
  CHECK(causal_pairs(seed().batch().seq_length()) == 33558528);
}

TEST_CASE("full updates in 10T tokens: 635,782; 1,220,701,440; 9,999,986,196,480; 13,803,520") {
  const TokenPlan t = token_plan(seed());
  CHECK(t.budget_derived);
  CHECK(t.budget == 10000000000000);
  CHECK(t.full_updates == 635782);
  CHECK(t.samples == 1220701440);
  CHECK(t.tokens == 9999986196480);
  CHECK(t.shortfall == 13803520);
  // An explicit budget replaces the derived one.
  const TokenPlan e = token_plan(seed(), 12000000000000);
  CHECK_FALSE(e.budget_derived);
  CHECK(e.shortfall == 12000000000000 - 9999986196480);
}

TEST_CASE("warmup: 20B tokens rounded up to 1,272 updates = 2,442,240 samples = 20,006,830,080 tokens") {
  CHECK(updates_covering(20000000000, config::tokens_per_update(seed())) == 1272);
  const WarmupPlan w = warmup_plan(seed());
  CHECK(w.samples == 2442240);
  CHECK(w.updates == 1272);
  CHECK(w.tokens == 20006830080);
}

TEST_CASE("cosine midpoint between 8e-5 and 8e-6: 4.4e-5") {
  const LrPoints p = lr_points(seed());
  CHECK(p.warmup_end == 8e-5);
  CHECK(p.midpoint == doctest::Approx(4.4e-5).epsilon(1e-12));
  CHECK(fmt::format("{:.6g}", p.midpoint) == "4.4e-05");
  CHECK(p.end == doctest::Approx(8e-6).epsilon(1e-12));
  CHECK(p.midpoint_sample == (2442240 + 1220701440) / 2);
  // Update k applies the schedule at (k - 1) x 1,920 samples: the peak first at 1,273.
  CHECK(p.warmup_end_update == 1273);
  CHECK(p.midpoint_update == 318528);
  CHECK(p.end_update == 635783);
}

TEST_CASE("AdamW on p=0.5, u=0.5, lr 8e-5, wd 0.1: 0.499996 after decay, 0.499956 after update") {
  const AdamwStep s = adamw_step(0.5, 0.5, seed().optimizer().lr(), seed().optimizer().weight_decay());
  CHECK(s.after_decay == doctest::Approx(0.499996).epsilon(1e-12));
  CHECK(s.after_update == doctest::Approx(0.499956).epsilon(1e-12));
  CHECK(fmt::format("{:.6f}", s.after_update) == "0.499956");
}

TEST_CASE("main state per GPU: DP1 140.63 GB, DP8 58.59 GB, DP80 48.05 GB") {
  // The articles' 7.8125e9 params per GPU, and this config's (just above it).
  CHECK(gb(main_state_bytes_per_gpu(7.8125e9, 8)) == "58.59");
  CHECK(gb(main_state_bytes_per_gpu(7.8125e9, 80)) == "48.05");
  CHECK(params_per_gpu(seed()) == doctest::Approx(7.8125e9).epsilon(1e-5));
  CHECK(params_per_gpu(seed()) >= 7.8125e9);
  CHECK(gb(layout_for(seed(), 1).main_state_bytes) == "140.63");
  CHECK(gb(layout_for(seed(), 8).main_state_bytes) == "58.59");
  CHECK(gb(layout_for(seed(), 80).main_state_bytes) == "48.05");
  // Without a distributed optimizer the 12 bytes are not sharded.
  CHECK(main_state_bytes_per_gpu(1.0, 80, false) == 18.0);
}

TEST_CASE("scaling 512 -> 1,024 GPUs at 180k -> 320k tokens/s: 1.78x, 89%") {
  const ScalingStep s = scaling_step({512, 180000.0}, {1024, 320000.0});
  CHECK(fixed2(s.speedup) == "1.78");
  CHECK(fmt::format("{:.0f}%", 100 * s.efficiency) == "89%");
  CHECK(s.efficiency == doctest::Approx(32.0 / 36.0));
}

TEST_CASE("10T tokens at 1.6M tokens/s: 72.34 days; at 90% calendar efficiency 80.38 days") {
  const Calendar c = calendar(double(token_plan(seed()).budget), 1.6e6, 0.9);
  CHECK(fixed2(c.compute_days) == "72.34");
  CHECK(fixed2(c.calendar_days) == "80.38");
}

TEST_CASE("microbatches per group for DP 8/16/40/80 at 1,920 sequences: 240 / 120 / 48 / 24") {
  CHECK(*layout_for(seed(), 8).microbatches == 240);
  CHECK(*layout_for(seed(), 16).microbatches == 120);
  CHECK(*layout_for(seed(), 40).microbatches == 48);
  CHECK(*layout_for(seed(), 80).microbatches == 24);
  CHECK(layout_for(seed(), 80).gpus == 5120);
  CHECK_FALSE(layout_for(seed(), 7).microbatches.has_value());
}

TEST_CASE("round_up_significant") {
  CHECK(round_up_significant(9999986196480, 2) == 10000000000000);
  CHECK(round_up_significant(1000, 2) == 1000);
  CHECK(round_up_significant(1001, 2) == 1100);
  CHECK(round_up_significant(20480, 2) == 21000);
  CHECK(round_up_significant(7, 2) == 7);
  CHECK(round_up_significant(12345, 1) == 20000);
}

TEST_CASE("the printed plan carries the articles' numbers") {
  PlanInputs in;
  in.tokens_per_s = 1.6e6;
  in.scaling = read_scaling_file(source("configs/seed-500b.scaling"));
  const std::string text = render_plan(seed(), in);
  for (const char* s : {"15,728,640", "1,920", "36.8%", "22.6%", "12.7%", "8,390,656", "33,558,528",
                        "635,782", "1,220,701,440", "9,999,986,196,480", "13,803,520", "1,272",
                        "2,442,240", "20,006,830,080", "4.4e-05", "0.499996", "0.499956", "140.63 GB",
                        "58.59 GB", "48.05 GB", "1.78x", "89%", "72.34", "80.38", "240", "120"}) {
    CAPTURE(s);
    CHECK(text.find(s) != std::string::npos);
  }
  CHECK(has_line(text, "  tokens per update                     15,728,640 = 1,920 x 8,192"));
  CHECK(has_line(text, "  1,024  16       320,000     1.78x                 89%"));
  CHECK(has_line(text, "  days of pure compute             72.34"));
  CHECK(has_line(text, "  calendar days at 90% efficiency  80.38"));
}

TEST_CASE("the plan's calendar with failures: the seed at Llama 3's failure rate") {
  PlanInputs in;
  in.tokens_per_s = 1.6e6;
  in.failures_per_gpu_hour = 419.0 / (54.0 * 24.0 * 16384.0);
  in.save_stall_s = 20;
  in.recovery_s = 900;
  const std::string text = render_plan(seed(), in);
  CHECK(text.find("Calendar with failures (RESTART from the newest checkpoint)") != std::string::npos);
  // 5,120 GPUs: 9.90 h between failures; a step of 15,728,640 tokens at 1.6 M/s.
  CHECK(text.find("9.90 h = 1 / (1.97e-05 failures per GPU-hour x 5,120 GPUs)") != std::string::npos);
  CHECK(text.find("9.830 s (15,728,640 tokens") != std::string::npos);
  FailureModel m;
  m.mtbf_s = mtbf_seconds(*in.failures_per_gpu_hour, 5120);
  m.save_stall_s = 20;
  m.recovery_s = 900;
  m.step_s = 15728640 / 1.6e6;
  const FailureCost best = best_interval(m);
  CAPTURE(text);
  CHECK(text.find(fmt::format("best interval                    {} steps", best.interval_steps)) != std::string::npos);
  CHECK(text.find(fmt::format("calendar days at {:.1f}% kept", 100 * best.efficiency)) != std::string::npos);
  CHECK(text.find(fmt::format("{:.2f}", 72.34 / best.efficiency).substr(0, 4)) != std::string::npos);
  // The seed's assumed 90 % comes out of these parts as more than 90 %.
  CHECK(best.efficiency > 0.9);
  CHECK(best.efficiency < 1.0);
}

TEST_CASE("textproto and Megatron arguments print the identical plan") {
  auto m = config::parse_megatron_args_file(source("configs/seed-500b.megatron-args"));
  config::validate(m.config, m.origins);
  PlanInputs in;
  in.tokens_per_s = 1.6e6;
  in.scaling = read_scaling_file(source("configs/seed-500b.scaling"));
  const std::string a = render_plan(seed(), in);
  const std::string b = render_plan(m.config, in);
  CHECK(a == b);
  CHECK(a.size() > 2000);
}

TEST_CASE("the embedded default plans too") {
  const Config c = config::load_config_file(source("configs/default.textproto"));
  const std::string text = render_plan(c, PlanInputs{});
  CHECK(text.find("microbatches per data-parallel group  4") != std::string::npos);
  CHECK(text.find("2 x 1 x 1 x 2 = 4 GPUs") == std::string::npos);  // TP1 PP2 DP2
  CHECK(text.find("1 x 2 x 1 x 2 = 4 GPUs") != std::string::npos);
}

TEST_CASE("scaling files: rows, comments, unmeasured rows, errors with file:line") {
  const auto rows = parse_scaling("# GPUs tps\n512 180000\n\n1024 3.2e5  # second\n2560\n", "s.txt");
  REQUIRE(rows.size() == 3);
  CHECK(rows[1].gpus == 1024);
  CHECK(*rows[1].tokens_per_s == 320000.0);
  CHECK_FALSE(rows[2].tokens_per_s.has_value());
  auto err = [](const std::string& text) {
    try {
      parse_scaling(text, "s.txt");
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  CHECK(err("512 1 2") == "s.txt:1: expected \"GPUs [tokens_per_s]\", got 3 values");
  CHECK(err("\nx 100") == "s.txt:2: GPUs must be a positive integer, got \"x\"");
  CHECK(err("512 -5") == "s.txt:1: tokens_per_s must be a positive number, got \"-5\"");
  CHECK(err("1024 1\n512 1") == "s.txt:2: GPUs must ascend: 512 after 1024");
  CHECK(err("# nothing\n") == "s.txt: no \"GPUs [tokens_per_s]\" rows");
}

namespace {

// The message of `f`'s std::overflow_error, or "(no error)".
template <class F>
std::string overflow_of(F f) {
  try {
    f();
  } catch (const std::overflow_error& e) {
    return e.what();
  }
  return "(no error)";
}

// What follows `label` on its line, leading spaces dropped ("" when there is no such label).
std::string after(const std::string& text, const std::string& label) {
  const auto at = text.find(label);
  if (at == std::string::npos) return "";
  const auto start = text.find_first_not_of(' ', at + label.size());
  return text.substr(start, text.find('\n', start) - start);
}

// Whether the plan prints a negative number (a minus after a space or parenthesis).
bool prints_negative(const std::string& text) {
  for (size_t i = 1; i + 1 < text.size(); ++i)
    if (text[i] == '-' && (text[i - 1] == ' ' || text[i - 1] == '(') && std::isdigit(text[i + 1])) return true;
  return false;
}

}  // namespace

TEST_CASE("2^62 train samples of one token plan exactly; midpoint and warmup do not wrap") {
  const Config c = config::load_config_text(
      "batch { seq_length: 1 }\n"
      "training { train_samples: 4611686018427387904 }\n"                            // 2^62
      "lr_schedule { warmup_samples: 4611686018427387904 decay_samples: 9223372036854775807 }",
      "huge.textproto");
  const TokenPlan t = token_plan(c);
  CHECK(t.full_updates == 576460752303423488);  // 2^62 / 8
  CHECK(t.tokens == 4611686018427387904);
  CHECK(t.budget == 4700000000000000000);
  CHECK(t.shortfall == 88313981572612096);
  const WarmupPlan w = warmup_plan(c);
  CHECK(w.updates == 576460752303423488);
  CHECK(w.tokens == 4611686018427387904);
  CHECK(lr_points(c).midpoint_sample == 6917529027641081855);  // 2^62 + (2^63 - 1 - 2^62) / 2
  const std::string text = render_plan(c, PlanInputs{});
  CHECK(after(text, "tokens they read") == "4,611,686,018,427,387,904");
  CHECK(after(text, "token budget") == "4,700,000,000,000,000,000");
  // The first update at the midpoint: ceil(midpoint / 8) + 1.
  CHECK(after(text, "decay midpoint") == "6,917,529,027,641,081,855  0.00055    864,691,128,455,135,233");
  CHECK_FALSE(prints_negative(text));
}

TEST_CASE("counts past 64 bits are refused, naming the fields and numbers") {
  // 2^62 samples of 64 tokens: validation refuses the config.
  CHECK(config::testing::error_of([] { config::load_config_text("training { train_samples: 4611686018427387904 }", "t.textproto"); }) ==
        "t.textproto:1: training.train_samples: 4611686018427387904 x batch.seq_length 64 = "
        "295147905179352825856 tokens: more than a 64-bit count holds (9223372036854775807)");

  // Warmup that covers 2^62 samples of 64 tokens: only the planner counts its tokens.
  const Config warm = config::load_config_text(
      "lr_schedule { warmup_samples: 4611686018427387904 decay_samples: 4611686018427387904 }", "w.textproto");
  const std::string warm_error =
      "warmup tokens, 576460752303423488 updates covering lr_schedule.warmup_samples 4611686018427387904 x 512 "
      "tokens per update = 295147905179352825856: more than a 64-bit count holds (9223372036854775807)";
  CHECK(overflow_of([&] { warmup_plan(warm); }) == warm_error);
  CHECK(overflow_of([&] { render_plan(warm, PlanInputs{}); }) == warm_error);

  // Train tokens that fit, whose budget rounded up to 2 significant figures does not.
  const Config edge = config::load_config_text(
      "batch { seq_length: 1 global_batch_size: 1 }\ntraining { train_samples: 9200000000000000001 }", "e.textproto");
  CHECK(overflow_of([&] { token_plan(edge); }) ==
        "the token budget, training.train_samples 9200000000000000001 x batch.seq_length 1 rounded up to 2 "
        "significant figures = 9300000000000000000: more than a 64-bit count holds (9223372036854775807)");
  CHECK(overflow_of([&] { round_up_significant(9200000000000000001, 2); }) ==
        "9200000000000000001 rounded up to 2 significant figures = 9300000000000000000: more than a 64-bit "
        "count holds (9223372036854775807)");

  // A microbatch of 2^28 sequences of 2^20 tokens, 2^16 wide: A is 2^65 bytes.
  const Config wide = config::load_config_text(
      "model { width: 65536 max_positions: 1048576 }\n"
      "batch { micro_batch_size: 268435456 global_batch_size: 268435456 seq_length: 1048576 }\n"
      "training { train_samples: 268435456 }",
      "a.textproto");
  CHECK(overflow_of([&] { tp_comm_plan(wide); }) ==
        "activation bytes A, batch.micro_batch_size 268435456 x batch.seq_length 1048576 x model.width 65536 x 2 = "
        "36893488147419103232: more than a 64-bit count holds (9223372036854775807)");
}

TEST_CASE("2^31 - 2 microbatches: the doubled row's idle is not wrapped through int32") {
  const Config c = config::load_config_text(
      "parallel { pipeline: 2 }\nbatch { global_batch_size: 2147483646 }\ntraining { train_samples: 2147483646 }",
      "m.textproto");
  CHECK(ideal_idle_fraction(2, 4294967292) == doctest::Approx(1.0 / 4294967293.0));
  const std::string text = render_plan(c, PlanInputs{});
  CHECK(after(text, "4,294,967,292 (double)") == "0.0%");
  CHECK_FALSE(prints_negative(text));
}

TEST_CASE("a measured rate beyond int64 prints in e-notation, not wrapped") {
  PlanInputs in;
  in.tokens_per_s = 1e30;
  const std::string text = render_plan(seed(), in);
  CHECK(text.find("Calendar for the token budget at 1.0000e+30 tokens/s") != std::string::npos);
  CHECK_FALSE(prints_negative(text));
}

TEST_CASE("the plan's interleaved 1F1B section: closed form, simulation and verdict per v; why a v does not apply") {
  // 8 layers on 2 stages (4 a stage: v = 2 and 4 divide it, 3 does not), 4 microbatches.
  Config c;
  c.mutable_model()->set_layers(8);
  c.mutable_parallel()->set_pipeline(2);
  c.mutable_batch()->set_micro_batch_size(1);
  c.mutable_batch()->set_global_batch_size(4);
  REQUIRE(config::microbatches_per_replica(c) == 4);
  PlanInputs in;
  const std::string text = render_plan(c, in);
  const auto at = text.find("Interleaved 1F1B, v model chunks a stage: ideal idle (p-1)/(vm+p-1), p = 2, m = 4");
  REQUIRE(at != std::string::npos);
  const std::string section = text.substr(at, text.find("\n\n", at) - at);
  MESSAGE(section);
  // v = 2: (p-1)/(vm+p-1) = 1/9; stage 0 holds 2(p-1) + (v-1)p + 1 = 5 chunk activations.
  // Against 1F1B's 2 whole microbatches: 2.5 / 2 = 1.25x the activations.
  CHECK(section.find("11.1%      11.1%  verified  5 x 1/2 of a stage                1.25x") != std::string::npos);
  // v = 4: 1/17 = 5.9%; 2 + 6 + 1 = 9 in flight, 2.25 / 2.
  CHECK(section.find("5.9%       5.9%  verified  9 x 1/4 of a stage                1.12x") != std::string::npos);
  CHECK(section.find("not for v = 3: 4 layers a stage") != std::string::npos);
  // One stage: no section.
  c.mutable_parallel()->set_pipeline(1);
  CHECK(render_plan(c, in).find("Interleaved") == std::string::npos);
}

TEST_CASE("the plan's ZB-H1 section: closed form and simulated idle beside 1F1B, both verified") {
  // p = 2, m = 4, F = B = W: 1F1B (p-1)/(m+p-1) = 1/5; ZB-H1 (p-1)/(3m+p-1) = 1/13.
  Config c;
  c.mutable_model()->set_layers(8);
  c.mutable_parallel()->set_pipeline(2);
  c.mutable_batch()->set_micro_batch_size(1);
  c.mutable_batch()->set_global_batch_size(4);
  PlanInputs in;
  const std::string text = render_plan(c, in);
  const auto at = text.find("Zero-bubble ZB-H1 beside 1F1B, equal F, B and W times (1F1B's backward = B + W), p = 2, m = 4");
  REQUIRE(at != std::string::npos);
  const std::string section = text.substr(at, text.find("\n\n", at) - at);
  MESSAGE(section);
  CHECK(section.find("1F1B      20.0%      20.0%        verified                       2 1") != std::string::npos);
  CHECK(section.find("ZB_H1      7.7%       7.7%        verified  2 2 (to W; to B as 1F1B)") != std::string::npos);
  CHECK(section.find("2 2 (to W; to B as 1F1B)") != std::string::npos);
}
