// The planted spike of issue 26: a run trained on the fortunes corpus and resumed from
// its checkpoint onto random printable bytes. The loss and the gradient norm jump at
// the first step on the new data; the detector (docs/metrics.md, "Spikes", default
// options) must fire there and at no step before it, and the record must carry what
// the coordinator knew of that step.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "actors/replay.h"
#include "actors/runtime.h"
#include "data/batch_source.h"
#include "data/default_corpus.h"
#include "data/indexed_dataset.h"
#include "data/prepare.h"
#include "data/tokenizer.h"
#include "metrics/jsonl_log.h"
#include "metrics/run_dir.h"
#include "metrics/spike_detector.h"
#include "test/support/same_state.h"
#include "test/support/scratch_dir.h"
#include "test/support/tiny_runtime_config.h"

using namespace troupe;
namespace fs = std::filesystem;

namespace {

// 400 documents of 200 random printable ASCII bytes (0x20..0x7e), blank-line separated,
// prepared with the byte tokenizer; returns the dataset prefix.
std::string random_bytes_dataset(const fs::path& dir) {
  fs::create_directories(dir);
  const auto text = dir / "random.txt";
  {
    std::ofstream out(text);
    std::mt19937_64 rng(26);
    for (int doc = 0; doc < 400; ++doc) {
      std::string line(200, ' ');
      for (auto& ch : line) ch = char(0x20 + rng() % 95);
      line.front() = 'x';  // never a line of spaces alone (that would end the document)
      out << line << "\n\n";
    }
  }
  data::PrepareOptions o;
  o.inputs = {text.string()};
  o.output_prefix = (dir / "random-bytes").string();
  o.format = data::InputFormat::BlankLines;
  auto tokenizer = data::make_byte_tokenizer();
  data::prepare_dataset(o, *tokenizer);
  return o.output_prefix;
}

actors::RunResult run(const Config& c, bool collect_state = false) {
  actors::RunOptions o;
  o.console = false;
  o.collect_state = collect_state;
  o.timeout = std::chrono::seconds(120);
  return actors::run_training(c, o);
}

std::vector<metrics::Json> spikes_of(const Config& c) {
  const auto path = metrics::run_dir_layout(c.logging().run_dir()).spikes;
  if (!fs::exists(path)) return {};
  return metrics::read_jsonl(path).objects;
}

}  // namespace

TEST_CASE("a run resumed onto random bytes spikes at the switch and not before") {
  const auto dir = testing::fresh_temp_dir("spike-switch");
  // The tiny model on PP2 (two stage norms in the record), 16 sequences of 32 tokens a
  // step, 40 steps on fortunes with the default spike options.
  Config c = testing::tiny_runtime_config(2, 1, 2);
  c.mutable_batch()->set_micro_batch_size(2);
  c.mutable_batch()->set_global_batch_size(16);
  c.mutable_optimizer()->set_lr(5e-3);
  c.mutable_optimizer()->set_min_lr(5e-4);
  c.mutable_lr_schedule()->set_warmup_samples(32);
  c.mutable_lr_schedule()->set_decay_samples(43 * 16);  // fixed: both parts share the schedule
  c.mutable_training()->set_train_samples(40 * 16);
  c.mutable_logging()->set_run_dir((dir / "run").string());
  const auto fortunes = run(c, /*collect_state=*/true);
  REQUIRE_MESSAGE(fortunes.outcome.status == "completed", fortunes.outcome.error);
  REQUIRE(fortunes.outcome.steps.size() == 40);
  CHECK(spikes_of(c).empty());

  // Three more steps from the checkpoint of step 40, on random bytes.
  Config noise = c;
  noise.mutable_data()->set_prefix(random_bytes_dataset(dir / "data"));
  noise.mutable_training()->set_train_samples(43 * 16);
  noise.mutable_checkpoint()->set_load("latest");
  const auto resumed = run(noise);
  REQUIRE_MESSAGE(resumed.outcome.status == "completed", resumed.outcome.error);
  REQUIRE(resumed.outcome.steps.size() == 3);
  const auto& at41 = resumed.outcome.steps[0];
  REQUIRE(at41.step == 41);
  MESSAGE("step 40: loss " << fortunes.outcome.steps.back().loss << ", grad norm "
                           << fortunes.outcome.steps.back().grad_norm << "; step 41: loss " << at41.loss
                           << ", grad norm " << at41.grad_norm);

  const auto spikes = spikes_of(c);
  REQUIRE(!spikes.empty());
  const auto& s = spikes.front();
  CHECK(s.at("step") == 41);  // the first on record, so none before it
  CHECK(s.at("loss").get<double>() == at41.loss);
  CHECK(s.at("window_used") == 40);
  const auto triggers = s.at("triggers").get<std::vector<std::string>>();
  CHECK(std::find(triggers.begin(), triggers.end(), "loss") != triggers.end());
  // The rule's two conditions, from the record's own numbers.
  const double median = s.at("median").get<double>(), mad = s.at("loss_mad").get<double>();
  CHECK(at41.loss > median * 1.3);
  CHECK(at41.loss > median + 5 * mad);
  CHECK(s.at("grad_norm").get<double>() == at41.grad_norm);
  CHECK(s.at("lr").get<double>() == at41.lr);
  CHECK(s.at("clipped").get<bool>() == at41.clipped);
  const auto stages = s.at("stage_grad_norms").get<std::vector<double>>();
  REQUIRE(stages.size() == 2);
  CHECK(std::sqrt(stages[0] * stages[0] + stages[1] * stages[1]) == doctest::Approx(at41.grad_norm).epsilon(1e-9));
  // Per layer: wte (tied head included), wpe, both blocks, ln_f; their squares add up
  // to the global norm's (to 1e-9 relative: another order of the same sums).
  const auto& layers = s.at("layer_grad_norms");
  std::vector<std::string> names;
  double squares = 0;
  for (const auto& [name, v] : layers.items()) {
    names.push_back(name);
    squares += v.get<double>() * v.get<double>();
  }
  CHECK(names == std::vector<std::string>{"wte", "wpe", "h.0", "h.1", "ln_f"});
  CHECK(std::sqrt(squares) == doctest::Approx(at41.grad_norm).epsilon(1e-9));
  CHECK(s.at("sample_ids").size() == 16);
  auto ids = resumed.outcome.step_samples[0];
  std::sort(ids.begin(), ids.end());
  CHECK(s.at("sample_ids") == ids);
  for (const auto& later : spikes) CHECK(later.at("step").get<int64_t>() >= 41);

  // Replay (docs/metrics.md, "Replay"): step 41 recomputed from the checkpoint of step
  // 40 with the run's saved config is the recorded step, bit for bit.
  const std::string run_dir = c.logging().run_dir();
  auto bits = [](double v) {
    uint64_t b;
    std::memcpy(&b, &v, sizeof b);
    return b;
  };
  actors::ReplayOptions ro;
  ro.run_dir = run_dir;
  ro.step = 41;
  ro.dump = true;
  const auto replay = actors::replay_run(ro);
  CHECK(replay.from_step == 40);
  CHECK(replay.samples_compared);
  REQUIRE(replay.steps.size() == 1);
  CHECK_MESSAGE(!replay.first_difference, actors::format_replay(replay));
  CHECK(bits(replay.steps[0].replayed.loss) == bits(at41.loss));
  CHECK(bits(replay.steps[0].replayed.grad_norm) == bits(at41.grad_norm));
  CHECK(replay.steps[0].replayed.samples_hash == at41.samples_hash);
  CHECK(fs::exists(fs::path(run_dir) / "replay" / "run_40_41" / "metrics.jsonl"));
  MESSAGE(actors::format_replay(replay));
  // The dump: step 41's documents with their losses, from the weights of step 40 on one
  // device. Its tokens are the step's; its loss matches the recorded one to 1e-9
  // (relative; the pipeline sums microbatches in another order).
  REQUIRE(replay.dump);
  const auto& dump = *replay.dump;
  CHECK(dump.loss_tokens == at41.loss_tokens);
  CHECK(dump.loss_sum / double(dump.loss_tokens) == doctest::Approx(at41.loss).epsilon(1e-9));
  REQUIRE(!dump.documents.empty());
  CHECK(dump.documents.front().loss_mean() >= dump.documents.back().loss_mean());
  const auto dumped = metrics::read_jsonl((fs::path(run_dir) / "replay" / "step_41" / "documents.jsonl").string());
  CHECK(dumped.objects.size() == dump.documents.size());
  CHECK(dumped.objects.front().at("text").is_string());
  ro.dump = false;

  // Counterfactuals on steps 41..42: a halved LR leaves step 41 (its loss and gradient
  // come from the weights of step 40) bitwise as recorded and changes step 42; skipping
  // step 41's samples changes step 41's loss itself: the spike is the data's.
  ro.step = 42;
  ro.lr_scale = 0.5;
  const auto half_lr = actors::replay_run(ro);
  REQUIRE(half_lr.steps.size() == 2);
  CHECK(half_lr.counterfactual);
  CHECK(bits(half_lr.steps[0].replayed.loss) == bits(at41.loss));
  CHECK(half_lr.steps[1].replayed.loss != half_lr.steps[1].recorded.loss);
  ro.lr_scale = 1.0;
  ro.skip_samples = ids;
  const auto skipped = actors::replay_run(ro);
  REQUIRE(skipped.steps.size() == 2);
  CHECK(skipped.steps[0].replayed.loss != at41.loss);
  auto passed_over = skipped.steps[0].replayed.skipped_samples;
  std::sort(passed_over.begin(), passed_over.end());
  CHECK(passed_over == ids);  // step 41 passed over each of its old samples once
  CHECK(skipped.steps[1].replayed.skipped_samples.empty());
  MESSAGE(actors::format_replay(skipped));

  // A tampered record is reported as a difference: step 41's grad_norm in metrics.jsonl
  // moved by one unit in the last place.
  const auto metrics_path = metrics::run_dir_layout(run_dir).metrics;
  auto lines = metrics::read_jsonl(metrics_path).objects;
  std::ofstream out(metrics_path, std::ios::trunc);
  for (auto& j : lines) {
    if (j.value("type", "") == "step" && j.at("step") == 41)
      j["grad_norm"] = std::nextafter(j.at("grad_norm").get<double>(), 1e9);
    out << j.dump() << "\n";
  }
  out.close();
  ro.step = 41;
  ro.skip_samples.clear();
  const auto tampered = actors::replay_run(ro);
  REQUIRE(tampered.first_difference);
  CHECK(tampered.first_difference->step == 41);
  CHECK(tampered.first_difference->quantity == "grad_norm");
  CHECK(actors::format_replay(tampered).find("DIFFERENT at step 41: grad_norm recorded") != std::string::npos);

  // logging.on_spike SKIP_UPDATE: the same resume from step 40 with the guard, in the
  // same run directory (its windows come from the 40 steps in metrics.jsonl). Step 41
  // is the spike: its update is dropped, so the record says skipped, and the weights
  // and Adam moments after it are bitwise those after step 40.
  Config guarded = noise;
  guarded.mutable_logging()->set_on_spike(LoggingConfig::SKIP_UPDATE);
  guarded.mutable_checkpoint()->set_load((fs::path(run_dir) / "checkpoints" / "step_00000040").string());
  guarded.mutable_checkpoint()->set_save_on_exit(false);
  guarded.mutable_training()->set_train_samples(41 * 16);
  const auto g = run(guarded, /*collect_state=*/true);
  REQUIRE_MESSAGE(g.outcome.status == "completed", g.outcome.error);
  REQUIRE(g.outcome.steps.size() == 1);
  CHECK(g.outcome.steps[0].skipped);
  CHECK(bits(g.outcome.steps[0].loss) == bits(at41.loss));
  CHECK(bits(g.outcome.steps[0].grad_norm) == bits(at41.grad_norm));
  CHECK(g.outcome.summary.skipped_steps == 1);
  REQUIRE(g.state);
  REQUIRE(fortunes.state);
  testing::check_same_state(*g.state, *fortunes.state);
}

TEST_CASE("data.skip_samples in a run: skipped from the start, accounted for, kept by a resume") {
  const auto dir = testing::fresh_temp_dir("skip-samples");
  Config c = testing::tiny_runtime_config(2, 2, 1);
  c.mutable_training()->set_train_samples(8 * 8);
  c.mutable_lr_schedule()->set_decay_samples(8 * 8);  // fixed: the halves below share the schedule
  c.mutable_checkpoint()->set_interval_steps(4);
  // The samples of step 2 in the order without skips, and the one at its position 51:
  // with the eight skipped before it, that position falls in step 6 (positions 48..56).
  const auto plain = data::BatchSource::open(c);
  std::vector<int64_t> skip = plain.global_batch_ids(8);
  skip.push_back(plain.sample_at(51));
  Config skipping = c;
  for (const int64_t id : skip) skipping.mutable_data()->add_skip_samples(id);
  skipping.mutable_logging()->set_run_dir((dir / "from-start").string());
  auto o = actors::RunOptions{};
  o.console = false;
  o.collect_state = true;
  o.timeout = std::chrono::seconds(120);
  const auto whole = actors::run_training(skipping, o);
  REQUIRE_MESSAGE(whole.outcome.status == "completed", whole.outcome.error);
  REQUIRE(whole.outcome.steps.size() == 8);

  // Step 2 passed over all eight of its old samples and trained on the next eight;
  // step 6 passed over one. consumed_samples counts trained samples only.
  CHECK(whole.outcome.steps[1].skipped_samples == std::vector<int64_t>(skip.begin(), skip.begin() + 8));
  CHECK(whole.outcome.steps[1].consumed_samples == 16);
  CHECK(whole.outcome.steps[5].skipped_samples == std::vector<int64_t>{skip[8]});
  CHECK(whole.outcome.summary.skipped_samples == 9);
  CHECK(whole.outcome.summary.consumed_samples == 64);
  // The audit: trained and skipped samples together are the first 73 positions of the
  // order without skips, each once.
  std::vector<int64_t> seen, want;
  for (size_t k = 0; k < whole.outcome.steps.size(); ++k) {
    seen.insert(seen.end(), whole.outcome.step_samples[k].begin(), whole.outcome.step_samples[k].end());
    seen.insert(seen.end(), whole.outcome.steps[k].skipped_samples.begin(), whole.outcome.steps[k].skipped_samples.end());
  }
  for (int64_t p = 0; p < 73; ++p) want.push_back(plain.sample_at(p));
  std::sort(seen.begin(), seen.end());
  std::sort(want.begin(), want.end());
  CHECK(seen == want);
  // metrics.jsonl carries the list (startup) and what each step passed over.
  const auto lines = metrics::read_jsonl(metrics::run_dir_layout(skipping.logging().run_dir()).metrics).objects;
  std::vector<int64_t> sorted_skip = skip;
  std::sort(sorted_skip.begin(), sorted_skip.end());
  CHECK(lines.front().at("skip_samples").get<std::vector<int64_t>>() == sorted_skip);
  int steps_with_skips = 0;
  for (const auto& j : lines)
    if (j.value("type", "") == "step" && !j.at("skipped_samples").empty()) ++steps_with_skips;
  CHECK(steps_with_skips == 2);

  // The same run stopped after step 4 and resumed with a config that no longer lists
  // the skips: the checkpoint's manifest keeps them, and the end is bitwise the same.
  Config first_half = skipping;
  first_half.mutable_logging()->set_run_dir((dir / "resumed").string());
  first_half.mutable_training()->set_train_samples(4 * 8);
  o.collect_state = false;
  const auto a = actors::run_training(first_half, o);
  REQUIRE_MESSAGE(a.outcome.status == "completed", a.outcome.error);
  Config second_half = c;
  second_half.mutable_logging()->set_run_dir((dir / "resumed").string());
  second_half.mutable_checkpoint()->set_load("latest");
  o.collect_state = true;
  const auto b = actors::run_training(second_half, o);
  REQUIRE_MESSAGE(b.outcome.status == "completed", b.outcome.error);
  REQUIRE(b.outcome.steps.size() == 4);
  for (size_t k = 0; k < 4; ++k) CHECK(b.outcome.step_samples[k] == whole.outcome.step_samples[k + 4]);
  CHECK(b.outcome.steps[1].skipped_samples == std::vector<int64_t>{skip[8]});
  REQUIRE(b.state);
  REQUIRE(whole.state);
  testing::check_same_state(*b.state, *whole.state);
}

TEST_CASE("garbage documents spike where the sampler put them; skipping their samples removes the spike") {
  const auto dir = testing::fresh_temp_dir("garbage-docs");
  fs::create_directories(dir);
  Config c = testing::tiny_runtime_config(2, 1, 2);
  c.mutable_batch()->set_micro_batch_size(2);
  c.mutable_batch()->set_global_batch_size(16);
  c.mutable_optimizer()->set_lr(5e-3);
  c.mutable_optimizer()->set_min_lr(5e-4);
  c.mutable_lr_schedule()->set_warmup_samples(32);
  c.mutable_training()->set_train_samples(26 * 16);
  c.mutable_checkpoint()->set_interval_steps(5);
  c.mutable_checkpoint()->set_keep_last(0);

  // The fortunes corpus copied, with the documents that step 25's samples read turned
  // into random printable bytes of the same lengths: the packing, the sample index and
  // the order stay those of the clean copy, so the sampler says where the garbage is.
  const std::string clean_prefix = data::ensure_default_corpus();
  const auto clean = data::IndexedDataset::open(clean_prefix);
  c.mutable_data()->set_prefix((dir / "clean").string());
  {
    data::IndexedDatasetWriter w(c.data().prefix(), data::dtype_for_vocab(257), 257);
    std::vector<int32_t> doc;
    for (int64_t q = 0; q < clean.sequences(); ++q) {
      doc.resize(size_t(clean.sequence_length(q)));
      clean.read(q, 0, int64_t(doc.size()), doc.data());
      w.add_document(doc);
    }
    w.finish();
  }
  const auto order = data::BatchSource::open(c);
  std::set<int64_t> garbage_docs;
  for (const int64_t id : order.global_batch_ids(24 * 16))
    for (const int64_t d : order.documents_of(id)) garbage_docs.insert(d);
  std::vector<int64_t> garbage_samples;  // every sample reading a garbage document
  for (int64_t id = 0; id < order.samples_per_epoch(); ++id)
    for (const int64_t d : order.documents_of(id))
      if (garbage_docs.count(d)) {
        garbage_samples.push_back(id);
        break;
      }
  std::set<int64_t> garbage_steps;  // where the sampler puts them in this run
  for (int64_t p = 0; p < 26 * 16; ++p)
    if (std::binary_search(garbage_samples.begin(), garbage_samples.end(), order.sample_at(p)))
      garbage_steps.insert(p / 16 + 1);
  REQUIRE(garbage_steps.count(25));
  {
    std::mt19937_64 rng(2026);
    data::IndexedDatasetWriter w((dir / "dirty").string(), data::dtype_for_vocab(257), 257);
    std::vector<int32_t> doc;
    for (int64_t q = 0; q < clean.sequences(); ++q) {
      doc.resize(size_t(clean.sequence_length(q)));
      clean.read(q, 0, int64_t(doc.size()), doc.data());
      if (garbage_docs.count(q))
        for (auto& t : doc)
          if (t != 256) t = int32_t(0x20 + rng() % 95);
      w.add_document(doc);
    }
    w.finish();
  }
  c.mutable_data()->set_prefix((dir / "dirty").string());
  const auto dirty_order = data::BatchSource::open(c);
  for (int64_t p = 0; p < 26 * 16; p += 7) REQUIRE(dirty_order.sample_at(p) == order.sample_at(p));

  c.mutable_logging()->set_run_dir((dir / "run").string());
  const auto r = run(c);
  REQUIRE_MESSAGE(r.outcome.status == "completed", r.outcome.error);
  const auto spikes = spikes_of(c);
  REQUIRE(!spikes.empty());
  CHECK(spikes.front().at("step") == 25);  // none before the garbage step
  MESSAGE("garbage steps (any garbage sample): " << garbage_steps.size() << "; step 24 loss "
                                                 << r.outcome.steps[23].loss << ", step 25 loss "
                                                 << r.outcome.steps[24].loss);

  // A replay from the checkpoint of step 20 that skips the garbage samples has no spike:
  // the recorded steps 1..20 and the replayed 21..26 judged in order.
  actors::ReplayOptions ro;
  ro.run_dir = c.logging().run_dir();
  ro.step = 26;
  ro.from = 20;
  ro.skip_samples = garbage_samples;
  const auto skipped = actors::replay_run(ro);
  REQUIRE(skipped.steps.size() == 6);
  metrics::SpikeDetector detector;
  int found = 0;
  auto judge = [&](const metrics::StepRecord& st) {
    metrics::StepDetail d;
    d.step = st.step;
    d.loss = st.loss;
    d.grad_norm = st.grad_norm;
    found += detector.observe(d).has_value();
  };
  for (int64_t k = 0; k < 20; ++k) judge(r.outcome.steps[size_t(k)]);
  for (const auto& s : skipped.steps) judge(s.replayed);
  CHECK(found == 0);
  MESSAGE(actors::format_replay(skipped));

  // A fresh run told to skip them from its start (data.skip_samples) has none either.
  Config fresh = c;
  fresh.mutable_logging()->set_run_dir((dir / "fresh").string());
  for (const int64_t id : garbage_samples) fresh.mutable_data()->add_skip_samples(id);
  const auto f = run(fresh);
  REQUIRE_MESSAGE(f.outcome.status == "completed", f.outcome.error);
  CHECK(spikes_of(fresh).empty());
  int64_t passed_over = 0;
  for (const auto& st : f.outcome.steps) passed_over += int64_t(st.skipped_samples.size());
  CHECK(passed_over == f.outcome.summary.skipped_samples);
  CHECK(passed_over >= 16);  // at least step 25's sixteen
}
