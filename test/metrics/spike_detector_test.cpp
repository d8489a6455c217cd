#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "metrics/error.h"
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

TEST_CASE("median_of") {
  CHECK(median_of({}) == 0);
  CHECK(median_of({3}) == 3);
  CHECK(median_of({5, 1, 3}) == 3);
  CHECK(median_of({4, 1, 3, 2}) == 2.5);
  CHECK(median_of({1, 1, 100, 1, 1}) == 1);
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

TEST_CASE("spike detector: judges against the running median of the previous W losses") {
  SpikeDetector det({/*window=*/5, /*multiple=*/2.0, /*min_history=*/3});
  // Too little history: even a big loss is not judged.
  CHECK_FALSE(det.observe(make_detail(1, 10.0, 0)));
  CHECK_FALSE(det.observe(make_detail(2, 3.0, 8)));
  CHECK(det.history() == 2);
  CHECK_FALSE(det.observe(make_detail(3, 3.0, 16)));
  CHECK(det.median() == 3.0);  // {10, 3, 3}
  // 6.0 is exactly 2 x median: not a spike (strictly greater is).
  CHECK_FALSE(det.observe(make_detail(4, 6.0, 24)));
  CHECK(det.median() == 4.5);  // {10, 3, 3, 6}
  CHECK_FALSE(det.observe(make_detail(5, 2.0, 32)));  // window full: {10, 3, 3, 6, 2}
  CHECK(det.median() == 3.0);
  CHECK_FALSE(det.observe(make_detail(6, 2.0, 40)));  // 10 leaves: {3, 3, 6, 2, 2}
  CHECK(det.median() == 3.0);

  auto spike = det.observe(make_detail(7, 6.5, 48));
  REQUIRE(spike);
  CHECK(spike->step == 7);
  CHECK(spike->loss == 6.5);
  CHECK(spike->median == 3.0);
  CHECK(spike->ratio == doctest::Approx(6.5 / 3.0));
  CHECK(spike->window_used == 5);
  CHECK_FALSE(spike->non_finite);
  CHECK(spike->grad_norm == 3.5);
  CHECK(spike->lr == 1e-4);
  CHECK(spike->sample_ids == std::vector<int64_t>{48, 49, 50, 51, 52, 53, 54, 55});
  CHECK(spike->content_hash == sample_content_hash({48, 49, 50, 51, 52, 53, 54, 55}));
  CHECK_FALSE(spike->repeat_of_step);
  REQUIRE(spike->microbatches.size() == 4);
  CHECK(spike->microbatches[3].replica == 1);
  CHECK(spike->microbatches[3].loss == doctest::Approx(6.8));
  CHECK(spike->microbatches[3].loss_tokens == 111);
  // The spike's loss joined the window: {3, 6, 2, 2, 6.5}.
  CHECK(det.median() == 3.0);
}

TEST_CASE("spike detector: the same samples spiking again are recognised as a repeat") {
  SpikeDetector det({4, 2.0, 2});
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

TEST_CASE("spike detector: a non-finite loss is a spike and stays out of the window") {
  SpikeDetector det({3, 3.0, 3});
  auto s = det.observe(make_detail(1, NAN, 0));
  REQUIRE(s);  // judged even without history
  CHECK(s->non_finite);
  CHECK(std::isnan(s->ratio));
  CHECK(det.history() == 0);
  det.observe(make_detail(2, 2.0, 8));
  auto inf = det.observe(make_detail(3, INFINITY, 16));
  REQUIRE(inf);
  CHECK(inf->non_finite);
  CHECK(det.history() == 1);
}

TEST_CASE("spike options are checked") {
  CHECK_THROWS_WITH_AS(SpikeDetector({0, 3.0, 1}), "spike detector: window must be at least 1, got 0", MetricsError);
  CHECK_THROWS_AS(SpikeDetector({10, 1.0, 1}), MetricsError);
  CHECK_THROWS_WITH_AS(SpikeDetector({10, 3.0, 11}), "spike detector: min_history must be in [1, window=10], got 11",
                       MetricsError);
}

TEST_CASE("spike records go to spikes.jsonl and teach a resumed run's detector") {
  ScratchDir dir;
  const std::string path = dir / "spikes.jsonl";
  SpikeDetector det({4, 2.0, 2});
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
  SpikeDetector resumed({4, 2.0, 2});
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
