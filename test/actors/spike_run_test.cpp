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
#include <map>
#include <random>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "replay/replay.h"
#include "actors/runtime.h"
#include "ckpt/commit.h"
#include "ckpt/reader.h"
#include "data/batch_source.h"
#include "data/default_corpus.h"
#include "data/indexed_dataset.h"
#include "data/prepare.h"
#include "data/tokenizer.h"
#include "engine/checkpointing.h"
#include "engine/document_losses.h"
#include "engine/rollback.h"
#include "kernels/cpu/cpu_device.h"
#include "metrics/jsonl_log.h"
#include "metrics/run_dir.h"
#include "metrics/spike_detector.h"
#include "model/gpt_stage.h"
#include "model/stage_range.h"
#include "test/support/fault.h"
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

// The garbage-documents corpus: the fortunes corpus copied, with the documents that
// step 25's samples read turned into random printable bytes of the same lengths. The
// packing, the sample index and the order stay those of the clean copy, so the sampler
// says where the garbage is. The config: the tiny model on PP2, 16 sequences of 32
// tokens a step (2 a microbatch), 26 steps, a checkpoint every 5.
struct GarbageCorpus {
  Config config;
  std::set<int64_t> docs;        // the garbage documents: every one step 25 reads
  std::vector<int64_t> samples;  // every sample reading a garbage document, ascending
  std::set<int64_t> steps;       // the steps of this run with a garbage sample
};

GarbageCorpus garbage_corpus(const fs::path& dir) {
  fs::create_directories(dir);
  GarbageCorpus g;
  Config& c = g.config;
  c = testing::tiny_runtime_config(2, 1, 2);
  c.mutable_batch()->set_micro_batch_size(2);
  c.mutable_batch()->set_global_batch_size(16);
  c.mutable_optimizer()->set_lr(5e-3);
  c.mutable_optimizer()->set_min_lr(5e-4);
  c.mutable_lr_schedule()->set_warmup_samples(32);
  c.mutable_training()->set_train_samples(26 * 16);
  c.mutable_checkpoint()->set_interval_steps(5);
  c.mutable_checkpoint()->set_keep_last(0);

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
  for (const int64_t id : order.global_batch_ids(24 * 16))
    for (const int64_t d : order.documents_of(id)) g.docs.insert(d);
  for (int64_t id = 0; id < order.samples_per_epoch(); ++id)
    for (const int64_t d : order.documents_of(id))
      if (g.docs.count(d)) {
        g.samples.push_back(id);
        break;
      }
  for (int64_t p = 0; p < 26 * 16; ++p)
    if (std::binary_search(g.samples.begin(), g.samples.end(), order.sample_at(p))) g.steps.insert(p / 16 + 1);
  REQUIRE(g.steps.count(25));
  {
    std::mt19937_64 rng(2026);
    data::IndexedDatasetWriter w((dir / "dirty").string(), data::dtype_for_vocab(257), 257);
    std::vector<int32_t> doc;
    for (int64_t q = 0; q < clean.sequences(); ++q) {
      doc.resize(size_t(clean.sequence_length(q)));
      clean.read(q, 0, int64_t(doc.size()), doc.data());
      if (g.docs.count(q))
        for (auto& t : doc)
          if (t != 256) t = int32_t(0x20 + rng() % 95);
      w.add_document(doc);
    }
    w.finish();
  }
  c.mutable_data()->set_prefix((dir / "dirty").string());
  const auto dirty_order = data::BatchSource::open(c);
  for (int64_t p = 0; p < 26 * 16; p += 7) REQUIRE(dirty_order.sample_at(p) == order.sample_at(p));
  return g;
}

// Every sample the run's rollbacks skipped, ascending.
std::vector<int64_t> rollback_skips(const actors::RunResult& r) {
  std::vector<int64_t> skipped;
  for (const auto& rb : r.rollbacks) skipped.insert(skipped.end(), rb.request.skip_ids.begin(), rb.request.skip_ids.end());
  std::sort(skipped.begin(), skipped.end());
  return skipped;
}

// The reference a rollback must equal: `fresh` (the run's config without ROLLBACK) told
// to skip `skipped` from its start trains the same samples in every step with the
// same losses as `r`, and ends with its weights and Adam moments, bit for bit.
void check_same_as_fresh_run_skipping(const actors::RunResult& r, Config fresh, const std::vector<int64_t>& skipped,
                                      const fs::path& run_dir) {
  fresh.mutable_logging()->set_run_dir(run_dir.string());
  for (const int64_t id : skipped) fresh.mutable_data()->add_skip_samples(id);
  const auto f = run(fresh, /*collect_state=*/true);
  REQUIRE_MESSAGE(f.outcome.status == "completed", f.outcome.error);
  REQUIRE(f.outcome.steps.size() == r.outcome.steps.size());
  for (size_t k = 0; k < f.outcome.steps.size(); ++k) {
    CAPTURE(k);
    CHECK(f.outcome.step_samples[k] == r.outcome.step_samples[k]);
    CHECK(f.outcome.steps[k].loss == r.outcome.steps[k].loss);
  }
  REQUIRE(r.state);
  REQUIRE(f.state);
  testing::check_same_state(*r.state, *f.state);
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
  replay::ReplayOptions ro;
  ro.run_dir = run_dir;
  ro.step = 41;
  ro.dump = true;
  const auto replay = replay::replay_run(ro);
  CHECK(replay.from_step == 40);
  CHECK(replay.samples_compared);
  REQUIRE(replay.steps.size() == 1);
  CHECK_MESSAGE(!replay.first_difference, replay::format_replay(replay));
  CHECK(bits(replay.steps[0].replayed.loss) == bits(at41.loss));
  CHECK(bits(replay.steps[0].replayed.grad_norm) == bits(at41.grad_norm));
  CHECK(replay.steps[0].replayed.samples_hash == at41.samples_hash);
  CHECK(fs::exists(fs::path(run_dir) / "replay" / "run_40_41" / "metrics.jsonl"));
  MESSAGE(replay::format_replay(replay));
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
  const auto half_lr = replay::replay_run(ro);
  REQUIRE(half_lr.steps.size() == 2);
  CHECK(half_lr.counterfactual);
  CHECK(bits(half_lr.steps[0].replayed.loss) == bits(at41.loss));
  CHECK(half_lr.steps[1].replayed.loss != half_lr.steps[1].recorded.loss);
  ro.lr_scale = 1.0;
  ro.skip_samples = ids;
  const auto skipped = replay::replay_run(ro);
  REQUIRE(skipped.steps.size() == 2);
  CHECK(skipped.steps[0].replayed.loss != at41.loss);
  auto passed_over = skipped.steps[0].replayed.skipped_samples;
  std::sort(passed_over.begin(), passed_over.end());
  CHECK(passed_over == ids);  // step 41 passed over each of its old samples once
  CHECK(skipped.steps[1].replayed.skipped_samples.empty());
  MESSAGE(replay::format_replay(skipped));

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
  const auto tampered = replay::replay_run(ro);
  REQUIRE(tampered.first_difference);
  CHECK(tampered.first_difference->step == 41);
  CHECK(tampered.first_difference->quantity == "grad_norm");
  CHECK(replay::format_replay(tampered).find("DIFFERENT at step 41: grad_norm recorded") != std::string::npos);

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
  const GarbageCorpus corpus = garbage_corpus(dir);
  Config c = corpus.config;
  const auto& garbage_samples = corpus.samples;
  const auto& garbage_steps = corpus.steps;
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
  replay::ReplayOptions ro;
  ro.run_dir = c.logging().run_dir();
  ro.step = 26;
  ro.from = 20;
  ro.skip_samples = garbage_samples;
  const auto skipped = replay::replay_run(ro);
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
  MESSAGE(replay::format_replay(skipped));

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

TEST_CASE("segment sums: one segment is its microbatch's loss sum bit for bit; each names its document") {
  // Tolerance, set before the run: a microbatch of several segments adds up to its loss
  // sum within 1e-12 relative (the same terms grouped by segment).
  const auto dir = testing::fresh_temp_dir("segment-sums");
  Config c = testing::tiny_runtime_config(2, 1, 1);  // one sample a microbatch
  c.mutable_data()->set_prefix(random_bytes_dataset(dir / "data"));  // documents of 201 tokens
  const auto src = data::BatchSource::open(c);
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> uniform(0.5f, 6.0f);
  int single = 0, several = 0;
  for (int64_t id = 0; id < 40; ++id) {
    const std::vector<int64_t> ids = {id};
    const data::Microbatch mb = src.samples(ids);
    std::vector<float> losses(size_t(mb.batch) * size_t(mb.seq));
    for (size_t k = 0; k < losses.size(); ++k) losses[k] = mb.loss_mask[k] != 0 ? uniform(rng) : 0.0f;
    const auto segments = engine::segment_losses(losses.data(), mb);
    const double sum = model::sum_token_losses(losses.data(), int64_t(losses.size()));
    double added = 0;
    int64_t tokens = 0;
    for (const auto& s : segments) {
      added += s.loss_sum;
      tokens += s.loss_tokens;
    }
    CHECK(tokens == mb.loss_tokens);
    if (segments.size() == 1) {
      ++single;
      CHECK(std::memcmp(&segments[0].loss_sum, &sum, sizeof sum) == 0);
    } else {
      ++several;
      CHECK(added == doctest::Approx(sum).epsilon(1e-12));
    }
    // Named by the sampler: the documents of the sample's loss-bearing pieces.
    const auto docs = engine::document_losses({segments}, ids, 1, src);
    std::vector<int64_t> named, want;
    for (const auto& d : docs) named.push_back(d.document);
    for (const auto& p : src.pieces_of(id))
      if (std::min<int64_t>(p.slot + p.length - 1, mb.seq) > p.slot) want.push_back(p.document);
    std::sort(want.begin(), want.end());
    CHECK(named == want);
  }
  CHECK(single > 0);
  CHECK(several > 0);
  std::vector<msg::SegmentLoss> bad = {{0, 9, 1.0, 1}};
  CHECK_THROWS_AS(engine::document_losses({bad}, {0}, 1, src), std::invalid_argument);
}

TEST_CASE("the garbage step's spike record: its documents and losses, the update-to-weight ratio; DP2 x PP2 as DP1") {
  // Tolerances, written before the runs:
  //  - the documents' loss tokens add up to the step's exactly, their loss sums to the
  //    step's within 1e-9 relative (the same per-token losses grouped by document);
  //  - update_norm, weight_norm and their ratio against the weights of the checkpoints of
  //    steps 24 and 25: 1e-9 relative (the same squares added in another order);
  //  - DP2 x PP2 resumed from this run's checkpoint of step 24: the same documents,
  //    samples, token counts and loss sums bit for bit (the same weights and
  //    microbatches on one thread a stage give the same per-token losses, added in the
  //    global batch's order in both layouts); its norms within 1e-5 relative (its
  //    gradients are summed over two replicas, in another order);
  //  - TP2 with sequence parallelism x PP2, resumed the same way: the same documents,
  //    samples and token counts; loss sums within 1e-5 relative each, norms within 1e-5
  //    (the row-parallel GEMMs and the vocabulary-parallel loss add in another order).
  const auto dir = testing::fresh_temp_dir("garbage-record");
  const GarbageCorpus corpus = garbage_corpus(dir);
  Config c = corpus.config;
  c.mutable_training()->set_train_samples(25 * 16);
  c.mutable_checkpoint()->set_interval_steps(24);  // step 24; step 25 on exit
  c.mutable_logging()->set_run_dir((dir / "run").string());
  const auto r = run(c);
  REQUIRE_MESSAGE(r.outcome.status == "completed", r.outcome.error);
  REQUIRE(r.outcome.steps.size() == 25);
  const auto spikes = spikes_of(c);
  REQUIRE(!spikes.empty());
  const auto& s = spikes.front();
  REQUIRE(s.at("step") == 25);
  const auto& at25 = r.outcome.steps[24];

  // What the sampler says step 25 reads: a piece at slot p of n tokens predicts from
  // its positions p .. p + n - 2 that are inputs of the window (below seq_length).
  const auto src = data::BatchSource::open(c);
  const int64_t T = c.batch().seq_length();
  std::map<int64_t, int64_t> want_tokens;
  std::map<int64_t, std::vector<int64_t>> want_samples;
  for (const int64_t id : r.outcome.step_samples[24])  // the global batch's order
    for (const auto& p : src.pieces_of(id)) {
      const int64_t n = std::min<int64_t>(p.slot + p.length - 1, T) - p.slot;
      if (n <= 0) continue;
      want_tokens[p.document] += n;
      auto& w = want_samples[p.document];
      if (w.empty() || w.back() != id) w.push_back(id);
    }
  const auto& docs = s.at("documents");
  REQUIRE(docs.size() == want_tokens.size());
  int64_t tokens = 0;
  double sum = 0;
  size_t k = 0;
  for (const auto& [doc, n] : want_tokens) {
    const auto& d = docs[k++];
    CHECK(d.at("dataset") == 0);
    CHECK(d.at("document") == doc);
    CHECK(d.at("loss_tokens") == n);
    CHECK(d.at("samples").get<std::vector<int64_t>>() == want_samples[doc]);
    CHECK(corpus.docs.count(doc) == 1);  // step 25 reads garbage only
    tokens += n;
    sum += d.at("loss_sum").get<double>();
  }
  CHECK(tokens == at25.loss_tokens);
  CHECK(sum == doctest::Approx(at25.loss * double(at25.loss_tokens)).epsilon(1e-9));
  // The top documents: the garbage ones of highest mean loss, highest first, each as in
  // the full list; the worst is above the step's loss.
  const auto& top = s.at("top_documents");
  REQUIRE(top.size() == std::min<size_t>(10, docs.size()));
  for (size_t i = 0; i < top.size(); ++i) {
    CHECK(corpus.docs.count(top[i].at("document").get<int64_t>()) == 1);
    if (i > 0) CHECK(top[i].at("loss_mean").get<double>() <= top[i - 1].at("loss_mean").get<double>());
    const auto same = std::find_if(docs.begin(), docs.end(), [&](const auto& d) { return d.at("document") == top[i].at("document"); });
    REQUIRE(same != docs.end());
    CHECK(*same == top[i]);
  }
  for (const auto& d : docs)
    CHECK(d.at("loss_mean").get<double>() <= top.front().at("loss_mean").get<double>());
  CHECK(top.front().at("loss_mean").get<double>() >= at25.loss);

  // ||delta W|| / ||W|| from the weights before and after step 25 (the checkpoints), on
  // one device: every parameter once.
  auto weights = [&](int64_t step) {
    kernels::cpu::CpuDevice device(1);
    model::GptStage m(c, model::StageRange::whole(c), device, 1);
    engine::restore_stage(ckpt::Checkpoint::open(engine::checkpoint_root(c) + "/" + ckpt::step_dir_name(step)), m);
    return std::vector<float>(m.params(), m.params() + m.param_count());
  };
  const auto before = weights(24), after = weights(25);
  REQUIRE(before.size() == after.size());
  double du = 0, dw = 0;
  for (size_t i = 0; i < before.size(); ++i) {
    const double d = double(after[i]) - double(before[i]);
    du += d * d;
    dw += double(before[i]) * double(before[i]);
  }
  REQUIRE(du > 0);
  CHECK(s.at("update_norm").get<double>() == doctest::Approx(std::sqrt(du)).epsilon(1e-9));
  CHECK(s.at("weight_norm").get<double>() == doctest::Approx(std::sqrt(dw)).epsilon(1e-9));
  CHECK(s.at("update_weight_ratio").get<double>() == doctest::Approx(std::sqrt(du / dw)).epsilon(1e-9));
  MESSAGE("step 25: " << docs.size() << " documents, worst " << top.front().at("document") << " at mean loss "
                      << top.front().at("loss_mean") << " (step loss " << at25.loss << "); update/weight ratio "
                      << s.at("update_weight_ratio"));

  // DP2 x PP2 from the checkpoint of step 24, in the same run directory (its spike
  // windows are the 24 steps before): step 25 is the same spike, a repeat of the first.
  Config wide = c;
  wide.mutable_parallel()->set_data(2);
  wide.mutable_checkpoint()->set_load(engine::checkpoint_root(c) + "/" + ckpt::step_dir_name(24));
  wide.mutable_checkpoint()->set_save_on_exit(false);
  const auto w = run(wide);
  REQUIRE_MESSAGE(w.outcome.status == "completed", w.outcome.error);
  REQUIRE(w.outcome.steps.size() == 1);
  const auto both = spikes_of(c);
  REQUIRE(both.size() == 2);
  const auto& s2 = both.back();
  CHECK(s2.at("step") == 25);
  CHECK(s2.at("repeat_of_step") == 25);
  CHECK(s2.at("documents") == s.at("documents"));
  CHECK(s2.at("top_documents") == s.at("top_documents"));
  CHECK(s2.at("weight_norm").get<double>() == doctest::Approx(s.at("weight_norm").get<double>()).epsilon(1e-5));
  CHECK(s2.at("update_norm").get<double>() == doctest::Approx(s.at("update_norm").get<double>()).epsilon(1e-5));
  CHECK(s2.at("update_weight_ratio").get<double>() ==
        doctest::Approx(s.at("update_weight_ratio").get<double>()).epsilon(1e-5));

  // TP2 + SP x PP2 from the same checkpoint: only the last stage's tp rank 0 reports.
  Config sliced = c;
  sliced.mutable_parallel()->set_tensor(2);
  sliced.mutable_parallel()->set_sequence_parallel(true);
  sliced.mutable_checkpoint()->set_load(engine::checkpoint_root(c) + "/" + ckpt::step_dir_name(24));
  sliced.mutable_checkpoint()->set_save_on_exit(false);
  const auto t = run(sliced);
  REQUIRE_MESSAGE(t.outcome.status == "completed", t.outcome.error);
  const auto with_tp = spikes_of(c);
  REQUIRE(with_tp.size() == 3);
  const auto& s3 = with_tp.back();
  CHECK(s3.at("step") == 25);
  REQUIRE(s3.at("documents").size() == docs.size());
  for (size_t i = 0; i < docs.size(); ++i) {
    const auto& a = s3.at("documents")[i];
    CHECK(a.at("document") == docs[i].at("document"));
    CHECK(a.at("samples") == docs[i].at("samples"));
    CHECK(a.at("loss_tokens") == docs[i].at("loss_tokens"));
    CHECK(a.at("loss_sum").get<double>() == doctest::Approx(docs[i].at("loss_sum").get<double>()).epsilon(1e-5));
  }
  CHECK(s3.at("update_weight_ratio").get<double>() ==
        doctest::Approx(s.at("update_weight_ratio").get<double>()).epsilon(1e-5));

  // A dropped update (logging.on_spike SKIP_UPDATE, the same resume on DP1): no norms.
  Config guarded = c;
  guarded.mutable_logging()->set_on_spike(LoggingConfig::SKIP_UPDATE);
  guarded.mutable_checkpoint()->set_load(engine::checkpoint_root(c) + "/" + ckpt::step_dir_name(24));
  guarded.mutable_checkpoint()->set_save_on_exit(false);
  const auto g = run(guarded);
  REQUIRE_MESSAGE(g.outcome.status == "completed", g.outcome.error);
  REQUIRE(g.outcome.steps.size() == 1);
  CHECK(g.outcome.steps[0].skipped);
  const auto guarded_records = spikes_of(c);
  REQUIRE(guarded_records.size() == 4);
  CHECK(guarded_records.back().at("update_norm").is_null());
  CHECK(guarded_records.back().at("weight_norm").is_null());
  CHECK(guarded_records.back().at("update_weight_ratio").is_null());
  CHECK(guarded_records.back().at("documents") == s.at("documents"));
}

TEST_CASE("decide_rollback: the samples from the spike step's first, the cap per window, the first epoch only") {
  Config c = testing::tiny_runtime_config(2, 1, 1);  // global batch 8
  c.mutable_logging()->set_on_spike(LoggingConfig::ROLLBACK);
  const auto train = data::BatchSource::open(c);
  // One global batch by default: the samples at positions 16..23 (step 3's), ascending.
  auto got = engine::decide_rollback(c, train, 3, 16, {});
  REQUIRE(std::holds_alternative<engine::RollbackRequest>(got));
  const auto& r = std::get<engine::RollbackRequest>(got);
  std::vector<int64_t> want;
  for (int64_t p = 16; p < 24; ++p) want.push_back(train.sample_at(p));
  std::sort(want.begin(), want.end());
  CHECK(r.spike_step == 3);
  CHECK(r.first_position == 16);
  CHECK(r.skip_ids == want);
  c.mutable_logging()->set_rollback_skip_samples(20);
  CHECK(std::get<engine::RollbackRequest>(engine::decide_rollback(c, train, 3, 16, {})).skip_ids.size() == 20);

  // Two rollbacks allowed within 10 steps: a third spike within 10 steps of both stops
  // the run; one 10 or more steps after them rolls back again.
  c.mutable_logging()->set_rollback_limit(2);
  c.mutable_logging()->set_rollback_window_steps(10);
  const auto capped = engine::decide_rollback(c, train, 9, 64, {3, 5});
  REQUIRE(std::holds_alternative<std::string>(capped));
  CHECK(std::get<std::string>(capped) ==
        "logging.on_spike ROLLBACK: step 9 is a spike, and 2 rollback(s) already happened within "
        "logging.rollback_window_steps = 10 (spikes at steps 3, 5; logging.rollback_limit = 2): the run stops here");
  CHECK(std::holds_alternative<std::string>(engine::decide_rollback(c, train, 12, 64, {3, 5})));
  CHECK(std::holds_alternative<engine::RollbackRequest>(engine::decide_rollback(c, train, 13, 64, {3, 5})));
  CHECK(std::holds_alternative<engine::RollbackRequest>(engine::decide_rollback(c, train, 15, 64, {3, 5})));

  // Samples that reach into the second epoch are not skipped: the run stops.
  const int64_t epoch = train.samples_per_epoch();
  const auto late = engine::decide_rollback(c, train, 40, epoch - 10, {});
  REQUIRE(std::holds_alternative<std::string>(late));
  CHECK(std::get<std::string>(late).find("reach past the first epoch (" + std::to_string(epoch) + " samples)") !=
        std::string::npos);
  CHECK(std::holds_alternative<engine::RollbackRequest>(engine::decide_rollback(c, train, 40, epoch - 20, {})));
}

TEST_CASE("logging.on_spike ROLLBACK: the garbage step is rolled back past and skipped, bitwise a fresh run that "
          "skips its samples, with a kill before and after the rollback") {
  const auto dir = testing::fresh_temp_dir("rollback");
  const GarbageCorpus corpus = garbage_corpus(dir);
  Config c = corpus.config;
  const auto plain = data::BatchSource::open(c);
  auto step25 = plain.global_batch_ids(24 * 16);
  std::sort(step25.begin(), step25.end());
  c.mutable_logging()->set_run_dir((dir / "run").string());
  c.mutable_logging()->set_on_spike(LoggingConfig::ROLLBACK);
  c.mutable_logging()->set_rollback_steps(6);  // step 25's spike goes back to the checkpoint of step 15
  c.mutable_logging()->set_rollback_limit(10);
  // A stage killed at step 23 (before the spike: the group restarts from step 20 and
  // meets the spike again) and an optimizer shard at step 26 (only the timeline after
  // the rollback reaches it).
  *c.mutable_faults()->add_fault() = testing::fault("stage/dp0/pp1/tp0", 23, Fault::BACKWARD);
  *c.mutable_faults()->add_fault() = testing::fault("optim/dp0/pp0/tp0", 26, Fault::OPTIMIZER);
  const auto r = run(c, /*collect_state=*/true);
  REQUIRE_MESSAGE(r.outcome.status == "completed", r.outcome.error);
  CHECK(r.restarts == 2);
  REQUIRE(!r.rollbacks.empty());
  const auto& first = r.rollbacks.front();
  CHECK(first.request.spike_step == 25);
  CHECK(first.request.first_position == 24 * 16);
  CHECK(first.request.skip_ids == step25);
  CHECK(first.done.target_step == 15);
  CHECK(first.done.moved_steps == std::vector<int64_t>{20});
  const fs::path root = dir / "run" / "checkpoints";
  CHECK(first.done.aside_dir == root.string() + ".rolled-back-25");
  CHECK(fs::exists(fs::path(first.done.aside_dir) / "step_00000020" / "manifest.pb"));
  const std::vector<int64_t> skipped = rollback_skips(r);
  MESSAGE(r.rollbacks.size() << " rollback(s), " << skipped.size() << " samples skipped");

  // Recorded: the spike, the rollback event, the skip list in the last checkpoint.
  const auto spikes = spikes_of(c);
  REQUIRE(!spikes.empty());
  CHECK(spikes.front().at("step") == 25);
  const auto lines = metrics::read_jsonl(metrics::run_dir_layout(c.logging().run_dir()).metrics).objects;
  int rollback_lines = 0;
  for (const auto& j : lines)
    if (j.value("type", "") == "rollback") {
      if (rollback_lines++ == 0) {
        CHECK(j.at("step") == 25);
        CHECK(j.at("resume_step") == 15);
        CHECK(j.at("skipped_samples").get<std::vector<int64_t>>() == step25);
      }
    }
  CHECK(rollback_lines == int(r.rollbacks.size()));
  const auto latest = ckpt::load_latest(root.string());
  REQUIRE(latest.checkpoint);
  const auto& listed = latest.checkpoint->manifest().data_position().skip_samples();
  CHECK(std::vector<int64_t>(listed.begin(), listed.end()) == skipped);

  // The sample audit over the final timeline: its samples and the ones it passed over
  // are the first positions of the order without skips, each once.
  REQUIRE(r.outcome.steps.size() == 26);
  std::vector<int64_t> seen, want;
  for (size_t k = 0; k < r.outcome.steps.size(); ++k) {
    CHECK(r.outcome.steps[k].step == int64_t(k) + 1);
    seen.insert(seen.end(), r.outcome.step_samples[k].begin(), r.outcome.step_samples[k].end());
    seen.insert(seen.end(), r.outcome.steps[k].skipped_samples.begin(), r.outcome.steps[k].skipped_samples.end());
  }
  for (int64_t p = 0; p < int64_t(seen.size()); ++p) want.push_back(plain.sample_at(p));
  std::sort(seen.begin(), seen.end());
  std::sort(want.begin(), want.end());
  CHECK(seen == want);

  // Replay (with the rollbacks' skips, read from metrics.jsonl) recomputes the final
  // timeline from the checkpoint the rollback kept, bit for bit.
  replay::ReplayOptions ro;
  ro.run_dir = c.logging().run_dir();
  ro.step = 26;
  ro.from = 15;
  const auto replay = replay::replay_run(ro);
  CHECK(replay.from_step == 15);
  CHECK_MESSAGE(!replay.first_difference, replay::format_replay(replay));

  // A fresh run told to skip the same samples from its start: the same samples in every
  // step, the same losses, and the same weights and moments at the end, bit for bit.
  check_same_as_fresh_run_skipping(r, corpus.config, skipped, dir / "fresh");
}

TEST_CASE("logging.on_spike ROLLBACK: a spike that comes back past the cap stops the run, its checkpoints kept") {
  const auto dir = testing::fresh_temp_dir("rollback-cap");
  Config c = garbage_corpus(dir).config;
  const auto plain = data::BatchSource::open(c);
  c.mutable_logging()->set_run_dir((dir / "run").string());
  c.mutable_logging()->set_on_spike(LoggingConfig::ROLLBACK);
  // One sample skipped per rollback: step 25 keeps fifteen garbage samples and spikes
  // again, past a cap of one rollback.
  c.mutable_logging()->set_rollback_skip_samples(1);
  c.mutable_logging()->set_rollback_limit(1);
  const auto r = run(c);
  CHECK(r.outcome.status == "failed");
  CHECK(r.exit_code() == 1);
  REQUIRE(r.rollbacks.size() == 1);
  CHECK(r.rollbacks[0].request.skip_ids == std::vector<int64_t>{plain.sample_at(24 * 16)});
  CHECK(r.rollbacks[0].done.target_step == 20);
  const std::string newest = (dir / "run" / "checkpoints" / "step_00000020").string();
  CHECK(r.outcome.error ==
        "logging.on_spike ROLLBACK: step 25 is a spike, and 1 rollback(s) already happened within "
        "logging.rollback_window_steps = 1000 (spikes at steps 25; logging.rollback_limit = 1): the run stops here "
        "(step 25 spiked again on other samples each time: that points at the optimizer settings, such as the peak "
        "LR or the warmup, more than at the data); the newest complete checkpoint is " + newest);
  CHECK(fs::exists(fs::path(newest) / "manifest.pb"));
  const auto lines = metrics::read_jsonl(metrics::run_dir_layout(c.logging().run_dir()).metrics).objects;
  REQUIRE(!lines.empty());
  CHECK(lines.back().at("type") == "summary");
  CHECK(lines.back().at("status") == "failed");

  // Resumed by a new process: the rollback of the first one (its metrics.jsonl line)
  // counts against the cap, so the spike stops the run at once instead of looping.
  Config resumed = c;
  resumed.mutable_checkpoint()->set_load("latest");
  const auto again = run(resumed);
  CHECK(again.outcome.status == "failed");
  CHECK(again.rollbacks.empty());
  CHECK(again.outcome.error.find("step 25 is a spike, and 1 rollback(s) already happened") != std::string::npos);
}

TEST_CASE("logging.on_spike ROLLBACK under DP2 with dropout: bitwise the fresh run that skips the same samples") {
  // Dropout's masks are keyed by a sample's slot in the run's order of trained samples
  // (data::Microbatch::first_slot), which skipping shifts the same way in both runs.
  const auto dir = testing::fresh_temp_dir("rollback-dp2");
  const GarbageCorpus corpus = garbage_corpus(dir);
  Config base = corpus.config;
  base.mutable_parallel()->set_data(2);
  base.mutable_parallel()->set_pipeline(1);
  base.mutable_model()->set_hidden_dropout(0.1f);
  base.mutable_model()->set_attention_dropout(0.1f);
  Config c = base;
  c.mutable_logging()->set_run_dir((dir / "run").string());
  c.mutable_logging()->set_on_spike(LoggingConfig::ROLLBACK);
  c.mutable_logging()->set_rollback_limit(10);
  const auto r = run(c, /*collect_state=*/true);
  REQUIRE_MESSAGE(r.outcome.status == "completed", r.outcome.error);
  REQUIRE(!r.rollbacks.empty());
  CHECK(r.rollbacks.front().request.spike_step == 25);
  CHECK(r.rollbacks.front().done.target_step == 20);
  check_same_as_fresh_run_skipping(r, base, rollback_skips(r), dir / "fresh");
}
