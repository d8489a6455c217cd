#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <string>

#include "messages/config.pb.h"
#include "metrics/error.h"
#include "metrics/json_records.h"
#include "metrics/jsonl_log.h"
#include "metrics/spike_detector.h"
#include "test/support/scratch_dir.h"

using namespace troupe::metrics;
using troupe::testing::ScratchDir;

namespace {

// A step of 2 replicas x 2 microbatches x 2 samples; IDs from `first_id` on.
StepDetail make_detail(int64_t step, double loss, int64_t first_id) {
  StepDetail d;
  d.step = step;
  d.loss = loss;
  d.grad_norm = 0.5 * double(step);
  d.lr = 1e-4;
  int64_t id = first_id;
  for (int rep = 0; rep < 2; ++rep)
    for (int mb = 0; mb < 2; ++mb) {
      MicrobatchLoss m;
      m.replica = rep;
      m.index = mb;
      m.sample_ids = {id, id + 1};
      id += 2;
      m.loss = loss + 0.1 * (rep * 2 + mb);
      m.loss_tokens = 100 + rep * 10 + mb;
      d.microbatches.push_back(m);
    }
  return d;
}

}  // namespace

TEST_CASE("median_of and mad_of") {
  CHECK(median_of({}) == 0);
  CHECK(median_of({3}) == 3);
  CHECK(median_of({5, 1, 3}) == 3);
  CHECK(median_of({4, 1, 3, 2}) == 2.5);
  CHECK(median_of({1, 1, 100, 1, 1}) == 1);
  CHECK(mad_of({}, 0) == 0);
  // |x - 3| = {2, 0, 1, 1, 97}: median 1.
  CHECK(mad_of({1, 3, 4, 2, 100}, 3) == 1);
  CHECK(mad_of({2, 2, 2, 2}, 2) == 0);
}

TEST_CASE("the robust rule needs both: k MADs above the median and the floor on the jump") {
  // Median 2, MAD 0.1, k 5, floor 0.3: the bar is max(2 + 0.5, 2 x 1.3) = 2.6.
  CHECK_FALSE(exceeds_robustly(2.55, 2, 0.1, 5, 0.3));  // 5.5 MADs, but only +27.5 %
  CHECK_FALSE(exceeds_robustly(2.6, 2, 0.1, 5, 0.3));   // exactly the floor: strictly above fires
  CHECK(exceeds_robustly(2.61, 2, 0.1, 5, 0.3));
  // A noisy window (MAD 0.5): +50 % is only 2 MADs.
  CHECK_FALSE(exceeds_robustly(3.0, 2, 0.5, 5, 0.3));
  CHECK(exceeds_robustly(4.6, 2, 0.5, 5, 0.3));
  // Below the median never fires.
  CHECK_FALSE(exceeds_robustly(1.0, 2, 0, 0, 0));
}

TEST_CASE("sample content hash: FNV-1a 64 over the sorted IDs") {
  // FNV-1a 64 of no bytes is its offset basis.
  CHECK(sample_content_hash({}) == 0xcbf29ce484222325ull);
  // FNV-1a 64 of the 8 bytes 01 00 00 00 00 00 00 00, worked out by hand from the
  // published offset basis and prime.
  uint64_t h = 0xcbf29ce484222325ull;
  const unsigned char bytes[8] = {1, 0, 0, 0, 0, 0, 0, 0};
  for (unsigned char b : bytes) h = (h ^ b) * 0x100000001b3ull;
  CHECK(sample_content_hash({1}) == h);
  CHECK(sample_content_hash({3, 1, 2}) == sample_content_hash({1, 2, 3}));
  CHECK(sample_content_hash({1, 2, 3}) != sample_content_hash({1, 2, 4}));
  CHECK(sample_content_hash({1, 2}) != sample_content_hash({1, 2, 2}));
}

TEST_CASE("spike detector: judges the loss against the median and MAD of the previous W losses") {
  // Floors 0.3 (loss) and 3 (grad norm), k 5; grad norms stay at 1.
  SpikeDetector det({/*window=*/5, /*min_history=*/3, /*mad_k=*/5.0, /*loss_min_jump=*/0.3,
                     /*grad_norm_min_jump=*/3.0});
  const auto step = [&](int64_t n, double loss) {
    auto d = make_detail(n, loss, 8 * n);
    d.grad_norm = 1.0;
    return det.observe(d);
  };
  // The warm-up window: too little history, even a big loss is not judged.
  CHECK_FALSE(step(1, 10.0));
  CHECK_FALSE(step(2, 3.0));
  CHECK(det.history() == 2);
  CHECK_FALSE(step(3, 3.1));
  CHECK(det.median() == 3.1);  // {10, 3, 3.1}
  // Judged now: the MAD of {10, 3, 3.1} around 3.1 is 0.1, so 4.1 is 10 MADs above,
  // and +32 % clears the floor.
  auto first = step(4, 4.1);
  REQUIRE(first);
  CHECK(first->triggers == std::vector<std::string>{"loss"});
  CHECK(first->median == 3.1);
  CHECK(first->loss_mad == doctest::Approx(0.1));
  CHECK(first->window_used == 3);
  // The spike's loss joined the window: {10, 3, 3.1, 4.1}, median 3.6, MAD 0.55.
  CHECK(det.median() == doctest::Approx(3.6));
  // 4.6 is +28 % (under the floor): silent.
  CHECK_FALSE(step(5, 4.6));
  CHECK_FALSE(step(6, 3.0));  // window full, 10 left: {3, 3.1, 4.1, 4.6, 3.0}
  CHECK(det.median() == 3.1);

  auto spike = step(7, 6.5);
  REQUIRE(spike);
  CHECK(spike->step == 7);
  CHECK(spike->loss == 6.5);
  CHECK(spike->median == 3.1);
  CHECK(spike->ratio == doctest::Approx(6.5 / 3.1));
  CHECK(spike->loss_mad == doctest::Approx(0.1));  // |x - 3.1| = {0.1, 0, 1, 1.5, 0.1}
  CHECK(spike->window_used == 5);
  CHECK_FALSE(spike->non_finite);
  CHECK(spike->grad_norm == 1.0);
  CHECK(spike->grad_norm_median == 1.0);
  CHECK(spike->grad_norm_mad == 0);
  CHECK(spike->lr == 1e-4);
  CHECK(spike->sample_ids == std::vector<int64_t>{56, 57, 58, 59, 60, 61, 62, 63});
  CHECK(spike->content_hash == sample_content_hash({56, 57, 58, 59, 60, 61, 62, 63}));
  CHECK_FALSE(spike->repeat_of_step);
  REQUIRE(spike->microbatches.size() == 4);
  CHECK(spike->microbatches[3].replica == 1);
  CHECK(spike->microbatches[3].loss == doctest::Approx(6.8));
  CHECK(spike->microbatches[3].loss_tokens == 111);
}

TEST_CASE("spike detector: the gradient norm is judged on its own window and floor") {
  SpikeDetector det({/*window=*/8, /*min_history=*/4, 5.0, 0.3, 3.0});
  const double norms[] = {1.0, 1.2, 0.9, 1.1, 1.0, 0.95};
  int64_t n = 0;
  for (double g : norms) {
    ++n;
    auto d = make_detail(n, 3.0, 8 * n);
    d.grad_norm = g;
    CHECK_FALSE(det.observe(d));
  }
  CHECK(det.grad_norm_median() == doctest::Approx(1.0));
  // 3.9x the median is many MADs above it but under the floor (more than 4x).
  ++n;
  auto d = make_detail(n, 3.0, 8 * n);
  d.grad_norm = 3.9;
  CHECK_FALSE(det.observe(d));
  ++n;
  d = make_detail(n, 3.0, 8 * n);
  d.grad_norm = 5.0;
  d.clipped = true;
  d.stage_grad_norms = {3.0, 4.0};
  auto s = det.observe(d);
  REQUIRE(s);
  CHECK(s->triggers == std::vector<std::string>{"grad_norm"});
  CHECK(s->grad_norm == 5.0);
  CHECK(s->grad_norm_median == doctest::Approx(1.0));  // {1, 1.2, 0.9, 1.1, 1, 0.95, 3.9}
  CHECK(s->grad_norm_ratio == doctest::Approx(5.0));
  CHECK(s->clipped);
  CHECK(s->stage_grad_norms == std::vector<double>{3.0, 4.0});
  CHECK(s->ratio == doctest::Approx(1.0));  // the loss did not move
}

TEST_CASE("spike detector, default options: the README run's jump fires on both series") {
  // The default run before the LR fix (issue 26): loss about 3.4 with grad norms near
  // 1, then one step at loss 7.4 and grad norm 134.
  SpikeDetector det;
  const double losses[] = {3.52, 3.47, 3.50, 3.44, 3.46, 3.41, 3.45, 3.40, 3.43, 3.38, 3.42, 3.36};
  const double norms[] = {1.10, 0.95, 1.02, 0.88, 1.20, 0.97, 1.05, 0.91, 1.00, 1.12, 0.93, 0.99};
  for (int i = 0; i < 12; ++i) {
    auto d = make_detail(i + 1, losses[i], 8 * i);
    d.grad_norm = norms[i];
    CHECK_FALSE(det.observe(d));
  }
  auto d = make_detail(13, 7.4, 96);
  d.grad_norm = 134;
  auto s = det.observe(d);
  REQUIRE(s);
  CHECK(s->triggers == std::vector<std::string>{"loss", "grad_norm"});
  CHECK(s->median == doctest::Approx(3.435));
  CHECK(s->grad_norm_median == doctest::Approx(0.995));
}

// A deterministic standard normal (Box-Muller on a fixed mt19937_64 stream).
struct Normal {
  std::mt19937_64 rng;
  explicit Normal(uint64_t seed) : rng(seed) {}
  double operator()() {
    const double u1 = (double(rng() >> 11) + 1.0) / 9007199254740993.0;  // (0, 1]
    const double u2 = double(rng() >> 11) / 9007199254740992.0;
    return std::sqrt(-2 * std::log(u1)) * std::cos(2 * M_PI * u2);
  }
};

TEST_CASE("spike detector, default options: silent on a noisy falling loss; a planted jump in it fires") {
  // 600 steps: a loss falling from 5.5 towards 2.5 with 4 % noise per step, and a
  // log-normal gradient norm (sigma 0.35) around 0.8: what an ordinary small run looks
  // like. Then the same series with step 400's loss raised by 60 % and its norm x 8.
  for (const bool planted : {false, true}) {
    CAPTURE(planted);
    Normal normal(2026);
    SpikeDetector det;
    std::vector<int64_t> spikes;
    for (int64_t n = 1; n <= 600; ++n) {
      double loss = (2.5 + 3.0 * std::exp(-double(n) / 80)) * (1 + 0.04 * normal());
      double norm = 0.8 * std::exp(0.35 * normal());
      if (planted && n == 400) {
        loss *= 1.6;
        norm *= 8;
      }
      auto d = make_detail(n, loss, 8 * n);
      d.grad_norm = norm;
      if (auto s = det.observe(d)) spikes.push_back(s->step);
    }
    CHECK(spikes == (planted ? std::vector<int64_t>{400} : std::vector<int64_t>{}));
  }
}

TEST_CASE("spike detector: a constant window (MAD 0) leaves the decision to the floor") {
  SpikeDetector det({4, 4, 5.0, 0.3, 3.0});
  for (int64_t n = 1; n <= 4; ++n) {
    auto d = make_detail(n, 2.0, 8 * n);
    d.grad_norm = 1.0;
    CHECK_FALSE(det.observe(d));
  }
  auto d = make_detail(5, 2.5, 40);  // +25 %: infinitely many MADs, under the floor
  d.grad_norm = 1.0;
  CHECK_FALSE(det.observe(d));
  d = make_detail(6, 2.7, 48);  // window {2, 2, 2, 2.5}: median 2, MAD 0; +35 % fires
  d.grad_norm = 1.0;
  auto s = det.observe(d);
  REQUIRE(s);
  CHECK(s->triggers == std::vector<std::string>{"loss"});
  CHECK(s->loss_mad == 0);
  CHECK(s->median == 2.0);
  // With no floor and MAD 0, anything above the median fires, the median itself does not.
  SpikeDetector bare({3, 3, 5.0, 0.0, 3.0});
  for (int64_t n = 1; n <= 3; ++n) {
    auto b = make_detail(n, 2.0, 8 * n);
    b.grad_norm = 1.0;
    bare.observe(b);
  }
  auto same = make_detail(4, 2.0, 32);
  same.grad_norm = 1.0;
  CHECK_FALSE(bare.observe(same));
  auto above = make_detail(5, 2.0001, 40);
  above.grad_norm = 1.0;
  CHECK(bare.observe(above));
}

TEST_CASE("spike detector: the same samples spiking again are recognised as a repeat") {
  SpikeDetector det({4, 2, 5.0, 0.3, 1e9});
  for (int s = 1; s <= 4; ++s) det.observe(make_detail(s, 2.0, 100 * s));
  auto first = det.observe(make_detail(5, 9.0, 500));
  REQUIRE(first);
  CHECK_FALSE(first->repeat_of_step);
  for (int s = 6; s <= 9; ++s) det.observe(make_detail(s, 2.0, 100 * s));
  // Step 10 is the material of step 5 again (a recomputed step after a restart),
  // reported by the replicas in another order.
  StepDetail again = make_detail(10, 8.0, 500);
  std::swap(again.microbatches[0], again.microbatches[3]);
  auto repeat = det.observe(again);
  REQUIRE(repeat);
  CHECK(repeat->repeat_of_step == 5);
  CHECK(repeat->content_hash == first->content_hash);
  // Different samples spiking are not a repeat.
  for (int s = 11; s <= 14; ++s) det.observe(make_detail(s, 2.0, 100 * s));
  auto other = det.observe(make_detail(15, 9.0, 1500));
  REQUIRE(other);
  CHECK_FALSE(other->repeat_of_step);
}

TEST_CASE("spike detector: a non-finite loss or gradient norm is a spike and stays out of its window") {
  SpikeDetector det({3, 3, 5.0, 0.3, 3.0});
  auto s = det.observe(make_detail(1, NAN, 0));
  REQUIRE(s);  // judged even without history
  CHECK(s->non_finite);
  CHECK(s->triggers == std::vector<std::string>{"loss"});
  CHECK(std::isnan(s->ratio));
  CHECK(det.history() == 0);
  det.observe(make_detail(2, 2.0, 8));
  auto inf = det.observe(make_detail(3, INFINITY, 16));
  REQUIRE(inf);
  CHECK(inf->non_finite);
  CHECK(det.history() == 1);
  // A skipped update: a finite loss, a non-finite norm.
  auto d = make_detail(4, 2.0, 24);
  d.grad_norm = INFINITY;
  auto norm = det.observe(d);
  REQUIRE(norm);
  CHECK(norm->non_finite);
  CHECK(norm->triggers == std::vector<std::string>{"grad_norm"});
  CHECK(det.history() == 2);
  CHECK(det.grad_norm_median() == 1.0);  // {0.5, 1.0, 1.5} (0.5 x step): the inf left out
}

TEST_CASE("spike console line names what fired") {
  SpikeRecord r;
  r.step = 41;
  r.loss = 5.62;
  r.median = 3.04;
  r.ratio = 5.62 / 3.04;
  r.grad_norm = 4.21;
  r.grad_norm_median = 0.83;
  r.grad_norm_ratio = 4.21 / 0.83;
  r.triggers = {"loss", "grad_norm"};
  CHECK(spike_line(r, "runs/x/spikes.jsonl") ==
        "spike at step 41 (loss, grad_norm): loss 5.6200 is 1.85x the running median 3.0400, grad norm 4.2100 is "
        "5.07x its median 0.8300; recorded in runs/x/spikes.jsonl");
  r.triggers = {"grad_norm"};
  r.grad_norm = NAN;
  r.repeat_of_step = 7;
  CHECK(spike_line(r, "s.jsonl") ==
        "spike at step 41 (grad_norm): grad norm nan (not finite) (same samples as step 7); recorded in s.jsonl");
}

TEST_CASE("spike record: every document, the ten worst by mean loss, the update norms; the line names the worst") {
  SpikeDetector det({/*window=*/3, /*min_history=*/1, /*mad_k=*/0.0, /*loss_min_jump=*/0.3,
                     /*grad_norm_min_jump=*/3.0});
  auto calm = make_detail(1, 2.0, 0);
  calm.grad_norm = 1.0;
  REQUIRE_FALSE(det.observe(calm));
  auto d = make_detail(2, 6.0, 8);
  d.grad_norm = 1.0;
  // Twelve documents: mean losses 1, 2, ..., 12 over 10 tokens each, except document
  // 105 (mean 12.5 over 4 tokens), in (dataset, document) order as the coordinator
  // gives them.
  for (int64_t k = 0; k < 12; ++k) {
    DocumentLoss doc;
    doc.document = 100 + k;
    doc.samples = {8 + k / 2};
    doc.loss_tokens = k == 5 ? 4 : 10;
    doc.loss_sum = k == 5 ? 50.0 : double(k + 1) * 10.0;
    d.documents.push_back(doc);
  }
  d.update_norm = 0.03;
  d.weight_norm = 12.0;
  const auto r = det.observe(d);
  REQUIRE(r);
  REQUIRE(r->documents.size() == 12);
  REQUIRE(r->top_documents.size() == kTopDocuments);
  std::vector<int64_t> top;
  for (const auto& t : r->top_documents) top.push_back(t.document);
  CHECK(top == std::vector<int64_t>{105, 111, 110, 109, 108, 107, 106, 104, 103, 102});
  REQUIRE(r->update_weight_ratio);
  CHECK(*r->update_weight_ratio == 0.03 / 12.0);
  const Json j = to_json(*r);
  CHECK(j.at("documents").size() == 12);
  CHECK(j.at("documents")[0].at("document") == 100);
  CHECK(j.at("top_documents")[0].at("loss_mean").get<double>() == 12.5);
  CHECK(j.at("top_documents")[0].at("loss_tokens") == 4);
  CHECK(j.at("update_weight_ratio").get<double>() == 0.03 / 12.0);
  CHECK(spike_line(*r, "s.jsonl") ==
        "spike at step 2 (loss): loss 6.0000 is 3.00x the running median 2.0000; worst document 105 (dataset 0): "
        "mean loss 12.5000 over 4 tokens; recorded in s.jsonl");
  // A dropped update: no norms, and null in the record.
  auto dropped = make_detail(3, 60.0, 16);
  dropped.grad_norm = 1.0;
  const auto r2 = det.observe(dropped);
  REQUIRE(r2);
  CHECK_FALSE(r2->update_weight_ratio);
  CHECK(to_json(*r2).at("update_weight_ratio").is_null());
  CHECK(to_json(*r2).at("update_norm").is_null());
  CHECK(to_json(*r2).at("top_documents").empty());
}

TEST_CASE("spike options are checked") {
  CHECK_THROWS_WITH_AS(SpikeDetector({0, 1, 5.0, 0.3, 3.0}), "spike detector: window must be at least 1, got 0",
                       MetricsError);
  CHECK_THROWS_WITH_AS(SpikeDetector({10, 11, 5.0, 0.3, 3.0}),
                       "spike detector: min_history must be in [1, window=10], got 11", MetricsError);
  CHECK_THROWS_WITH_AS(SpikeDetector({10, 1, -1.0, 0.3, 3.0}),
                       "spike detector: mad_k must be finite and not negative, got -1.000000", MetricsError);
  CHECK_THROWS_AS(SpikeDetector({10, 1, 5.0, NAN, 3.0}), MetricsError);
  CHECK_THROWS_AS(SpikeDetector({10, 1, 5.0, 0.3, INFINITY}), MetricsError);
}

TEST_CASE("spike records go to spikes.jsonl and teach a resumed run's detector") {
  ScratchDir dir;
  const std::string path = dir / "spikes.jsonl";
  SpikeDetector det({4, 2, 5.0, 0.3, 1e9});
  det.observe(make_detail(1, 2.0, 0));
  det.observe(make_detail(2, 2.0, 8));
  auto spike = det.observe(make_detail(3, 7.0, 16));
  REQUIRE(spike);
  {
    JsonlLog log(path);
    log.write(to_json(*spike), /*durable=*/true);
  }
  const auto lines = read_jsonl(path).objects;
  REQUIRE(lines.size() == 1);
  const auto& j = lines[0];
  CHECK(j["type"] == "spike");
  CHECK(j["step"] == 3);
  CHECK(j["loss"] == 7.0);
  CHECK(j["median"] == 2.0);
  CHECK(j["loss_mad"] == 0.0);
  CHECK(j["triggers"] == Json::array({"loss"}));
  CHECK(j["grad_norm"] == 1.5);
  CHECK(j["grad_norm_median"] == 0.75);
  CHECK(j["stage_grad_norms"] == Json::array());
  CHECK(j["clipped"] == false);
  CHECK(j["sample_ids"].size() == 8);
  CHECK(j["sample_ids"][0] == 16);
  CHECK(j["content_hash"].get<std::string>().size() == 16);
  CHECK(j["repeat_of_step"].is_null());
  REQUIRE(j["microbatches"].size() == 4);
  CHECK(j["microbatches"][2]["replica"] == 1);
  CHECK(j["microbatches"][2]["index"] == 0);
  CHECK(j["microbatches"][2]["sample_ids"] == Json::array({20, 21}));
  CHECK(j["microbatches"][2]["loss_tokens"] == 110);
  CHECK(j["microbatches"][2]["loss"].get<double>() == doctest::Approx(7.2));

  // A new process: fresh detector, history loaded from the file.
  SpikeDetector resumed({4, 2, 5.0, 0.3, 1e9});
  load_spike_history(path, resumed);
  resumed.observe(make_detail(1, 2.0, 0));
  resumed.observe(make_detail(2, 2.0, 8));
  auto again = resumed.observe(make_detail(3, 7.0, 16));
  REQUIRE(again);
  CHECK(again->repeat_of_step == 3);

  load_spike_history(dir / "none.jsonl", resumed);  // missing: no history, no error
  JsonlLog(dir / "bad.jsonl").write({{"type", "spike"}, {"step", 3}, {"content_hash", "xyz"}});
  CHECK_THROWS_WITH_AS(load_spike_history(dir / "bad.jsonl", resumed),
                       (dir / "bad.jsonl" + ": object 1: content_hash \"xyz\" is not 16 hex digits").c_str(),
                       MetricsError);
}

TEST_CASE("a resumed run's windows are warmed from the steps before its checkpoint") {
  const auto line = [](int64_t step, double loss, double norm) {
    return Json{{"type", "step"},      {"time", 1.0},        {"step", step},           {"consumed_samples", 8 * step},
                {"loss", json_number(loss)}, {"lr", 1e-3},   {"grad_norm", json_number(norm)}, {"clipped", false},
                {"skipped", !std::isfinite(norm)}, {"tokens_per_s", 1.0}, {"input_tokens", 64}, {"loss_tokens", 60},
                {"padding_tokens", 0}, {"step_time_s", 0.1}, {"restarts", 0},        {"recomputed", false}};
  };
  // Steps 1-4, then a restart that redid step 3 (the later line counts), then step 5,
  // which the checkpoint of step 4 does not include; an eval line in between.
  const std::vector<Json> lines = {line(1, 9.0, 9.0), line(2, 3.0, 1.0), line(3, 8.0, 8.0),
                                   Json{{"type", "eval"}, {"time", 1.0}, {"step", 3}, {"loss", 3.0}},
                                   line(4, 3.2, 1.2), line(3, 3.1, 1.1), line(5, 7.0, 7.0)};
  SpikeDetector det({/*window=*/3, /*min_history=*/3, 5.0, 0.3, 3.0});
  CHECK(warm_spike_windows(lines, 4, det) == 3);  // steps 2, 3 (redone), 4: step 1 is out of the window
  CHECK(det.history() == 3);
  CHECK(det.median() == 3.1);
  CHECK(det.grad_norm_median() == doctest::Approx(1.1));
  // Judged at once: the first step after the checkpoint.
  auto d = make_detail(5, 6.0, 40);
  d.grad_norm = 1.0;
  auto s = det.observe(d);
  REQUIRE(s);
  CHECK(s->window_used == 3);
  // A skipped step's non-finite norm stays out of the norm window.
  SpikeDetector other({3, 1, 5.0, 0.3, 3.0});
  CHECK(warm_spike_windows({line(1, 3.0, INFINITY)}, 1, other) == 1);
  CHECK(other.history() == 1);
  CHECK(other.grad_norm_median() == 0);
}

TEST_CASE("SpikeOptions' defaults are LoggingConfig's") {
  const troupe::LoggingConfig lc;
  const SpikeOptions o;
  CHECK(o.window == lc.spike_window());
  CHECK(o.min_history == lc.spike_min_history());
  CHECK(o.mad_k == lc.spike_mad_k());
  CHECK(o.loss_min_jump == lc.spike_loss_min_jump());
  CHECK(o.grad_norm_min_jump == lc.spike_grad_norm_min_jump());
}
