#include "replay/replay.h"

#include <google/protobuf/text_format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <span>
#include <stdexcept>

#include <fmt/format.h>

#include "actors/runtime.h"
#include "ckpt/commit.h"
#include "ckpt/error.h"
#include "ckpt/reader.h"
#include "config/derived.h"
#include "config/override.h"
#include "config/text_format.h"
#include "config/validate.h"
#include "data/batch_source.h"
#include "engine/checkpointing.h"
#include "engine/rollback.h"
#include "engine/run_state.h"
#include "metrics/json_records.h"
#include "metrics/run_history.h"

namespace troupe::replay {
namespace {

namespace fs = std::filesystem;

// Written into the scratch directory: a later replay may empty a directory holding it,
// and no other.
constexpr const char* kMarker = ".troupe-replay";

std::string num(double v) { return fmt::format("{:.17g}", v); }

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

std::string join_ids(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(v[i]);
  }
  return s;
}

// The first quantity of `got` that is not bitwise `want`, data first (a different
// batch explains every number after it).
std::optional<ReplayDifference> difference(const metrics::StepRecord& want, const metrics::StepRecord& got) {
  auto diff = [&](const char* q, std::string a, std::string b) {
    return ReplayDifference{want.step, q, std::move(a), std::move(b)};
  };
  if (want.consumed_samples != got.consumed_samples)
    return diff("consumed_samples", std::to_string(want.consumed_samples), std::to_string(got.consumed_samples));
  if (want.samples_hash && got.samples_hash && *want.samples_hash != *got.samples_hash)
    return diff("samples", "hash " + metrics::hex16(*want.samples_hash), "hash " + metrics::hex16(*got.samples_hash));
  if (want.loss_tokens != got.loss_tokens)
    return diff("loss_tokens", std::to_string(want.loss_tokens), std::to_string(got.loss_tokens));
  if (!same_bits(want.grad_norm, got.grad_norm)) return diff("grad_norm", num(want.grad_norm), num(got.grad_norm));
  if (!same_bits(want.loss, got.loss)) return diff("loss", num(want.loss), num(got.loss));
  if (!same_bits(want.lr, got.lr)) return diff("lr", num(want.lr), num(got.lr));
  if (want.skipped != got.skipped || want.clipped != got.clipped)
    return diff(want.skipped != got.skipped ? "skipped" : "clipped",
                want.skipped != got.skipped ? (want.skipped ? "true" : "false") : (want.clipped ? "true" : "false"),
                want.skipped != got.skipped ? (got.skipped ? "true" : "false") : (got.clipped ? "true" : "false"));
  return std::nullopt;
}

std::string checkpoint_root_of(const Config& run, const fs::path& run_dir) {
  return run.checkpoint().dir().empty() ? (run_dir / "checkpoints").string() : run.checkpoint().dir();
}

// The checkpoint to start from: --from's, or the newest complete one before step N
// (a damaged one is passed over, as a resume would). Returns its directory and step;
// ("", 0) when there is none before N and --from was not given.
std::pair<std::string, int64_t> pick_checkpoint(const std::string& root, const ReplayOptions& o) {
  std::vector<int64_t> steps;
  if (fs::is_directory(root)) steps = ckpt::list_step_dirs(root);
  std::optional<int64_t> latest;
  if (fs::is_directory(root)) latest = ckpt::read_latest(root);
  if (o.from) {
    if (*o.from == 0) return {"", 0};
    const std::string dir = (fs::path(root) / ckpt::step_dir_name(*o.from)).string();
    if (std::find(steps.begin(), steps.end(), *o.from) == steps.end())
      throw std::invalid_argument(fmt::format("--from {}: no checkpoint {} (the run's checkpoints: {})", *o.from, dir,
                                              steps.empty() ? std::string("none") : join_ids(steps)));
    ckpt::Checkpoint::open(dir);  // damage: one CheckpointError naming the shard
    return {dir, *o.from};
  }
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    if (*it >= o.step || (latest && *it > *latest)) continue;
    const std::string dir = (fs::path(root) / ckpt::step_dir_name(*it)).string();
    try {
      ckpt::Checkpoint::open(dir);
      return {dir, *it};
    } catch (const ckpt::CheckpointError&) {
      continue;  // damaged or never committed: an older one may do
    }
  }
  return {"", 0};
}

// Every train sample whose window reads one of `docs`.
std::vector<int64_t> samples_reading(const Config& c, const std::vector<int64_t>& docs) {
  const auto src = data::BatchSource::open(c, data::Split::Train);
  if (src.datasets() > 1)
    throw std::invalid_argument("--skip-documents: document numbers name documents of one dataset, but the run reads a "
                                "blend of " + std::to_string(src.datasets()) + " (data.blend); skip its samples by "
                                "ID instead (--skip-samples)");
  const std::set<int64_t> wanted(docs.begin(), docs.end());
  std::set<int64_t> found_docs;
  std::vector<int64_t> ids;
  for (int64_t id = 0; id < src.samples_per_epoch(); ++id) {
    bool hit = false;
    for (const int64_t d : src.documents_of(id))
      if (wanted.count(d)) {
        hit = true;
        found_docs.insert(d);
      }
    if (hit) ids.push_back(id);
  }
  for (const int64_t d : wanted)
    if (!found_docs.count(d))
      throw std::invalid_argument(fmt::format("--skip-documents: document {} is in no sample of the train split of {}",
                                              d, src.prefix()));
  return ids;
}

// A run whose spikes rolled it back (logging.on_spike ROLLBACK) trained its final
// timeline with their samples skipped: the "rollback" lines of metrics.jsonl add them to
// the list of the run's config (they lie past the checkpoint each rollback resumed, so
// the steps before it read the same samples either way). Its recorded steps keep no
// rolled-back spike, so the replay drops a spike's update as the run's last timeline
// did at most (a run stopped at the rollback cap): SKIP_UPDATE.
// The replay's config is a new run's: what the recorded run skipped becomes what it is
// configured to skip (data.skip_samples, sorted, each once: the config check refuses repeats).
void skip_in_config(Config& c, std::span<const int64_t> ids) {
  std::vector<int64_t> skip(c.data().skip_samples().begin(), c.data().skip_samples().end());
  engine::merge_skip_samples(skip, ids);
  c.mutable_data()->clear_skip_samples();
  for (const int64_t id : skip) c.mutable_data()->add_skip_samples(id);
}

void with_rollback_skips(Config& run, const fs::path& metrics_path) {
  for (const auto& r : engine::recorded_rollbacks(metrics_path.string())) skip_in_config(run, r.skipped_samples);
  if (run.logging().on_spike() == LoggingConfig::ROLLBACK) run.mutable_logging()->set_on_spike(LoggingConfig::SKIP_UPDATE);
}

}  // namespace

Config replay_config(const Config& run, const ReplayOptions& o, const std::string& checkpoint, int64_t from_step) {
  Config c = run;
  const int64_t G = run.batch().global_batch_size();
  // The schedule ends where the run's ends, whatever train_samples becomes here.
  c.mutable_lr_schedule()->set_decay_samples(config::decay_samples(run));
  c.mutable_training()->set_train_samples(o.step * G);
  c.mutable_training()->set_eval_samples(0);  // validation changes no weight
  c.mutable_training()->set_eval_interval(0);
  c.mutable_logging()->set_run_dir(o.out_dir);
  c.mutable_logging()->set_progress_bar(false);
  c.mutable_logging()->set_tensorboard(false);
  auto* ck = c.mutable_checkpoint();
  ck->set_dir((fs::path(o.out_dir) / "checkpoints").string());
  ck->set_load(checkpoint);
  ck->set_interval_steps(0);
  ck->set_interval_seconds(0);
  ck->set_save_on_exit(false);
  ck->set_keep_last(0);
  // The dump of step N reads the weights after N - 1 (2(N - 1) > N from N = 3 on: one save).
  if (o.dump && from_step < o.step - 1) ck->set_interval_steps(int32_t(o.step - 1));
  c.clear_faults();  // the run's injected failures recover bitwise; replaying them only costs time
  // Replay small: the logical layout on one physical replica where it may be hosted so.
  int physical = o.physical_replicas;
  if (physical < 0)
    physical = c.parallel().distributed_optimizer() && c.device().type() == DeviceConfig::CPU &&
                       c.cluster().workers() == 0
                   ? 1
                   : 0;
  if (physical > 0) c.mutable_parallel()->set_physical_replicas(physical);

  skip_in_config(c, o.skip_samples);
  if (!o.skip_documents.empty()) skip_in_config(c, samples_reading(c, o.skip_documents));
  if (o.lr_scale != 1.0) {
    if (!(o.lr_scale > 0)) throw std::invalid_argument(fmt::format("--lr-scale must be positive, got {}", o.lr_scale));
    c.mutable_optimizer()->set_lr(run.optimizer().lr() * o.lr_scale);
    c.mutable_optimizer()->set_min_lr(run.optimizer().min_lr() * o.lr_scale);
  }
  if (o.clip) c.mutable_optimizer()->set_clip_grad(*o.clip);
  config::Origins origins("the replay of " + o.run_dir);
  for (const auto& s : o.sets) config::apply_override(c, s, &origins);
  config::validate(c, origins);
  return c;
}

ReplayResult replay_run(const ReplayOptions& given) {
  ReplayOptions o = given;
  if (o.step < 1) throw std::invalid_argument(fmt::format("--step must be at least 1, got {}", o.step));
  if (o.dump && o.counterfactual())
    throw std::invalid_argument("--dump writes the recorded run's step: give it without a change");
  const fs::path run_dir(o.run_dir);
  const fs::path config_path = run_dir / "config.textproto";
  if (!fs::is_regular_file(config_path))
    throw std::invalid_argument(config_path.string() + ": missing: RUN_DIR is not a run directory");
  Config run = config::load_config_file(config_path.string());
  with_rollback_skips(run, run_dir / "metrics.jsonl");
  if (run.cluster().workers() > 0)
    throw std::invalid_argument(config_path.string() +
                                ": a cluster run (cluster.workers > 0); replay recomputes in one process and does "
                                "not replay cluster runs");
  if (o.from && (*o.from < 0 || *o.from >= o.step))
    throw std::invalid_argument(fmt::format("--from {} must be in [0, --step {})", *o.from, o.step));

  // What the run recorded, before anything is computed.
  const metrics::RunHistory history = metrics::load_run_history(o.run_dir);
  std::map<int64_t, metrics::StepRecord> recorded;
  for (const auto& h : history.steps) recorded[h.record.step] = h.record;

  const auto [checkpoint, from_step] = pick_checkpoint(checkpoint_root_of(run, run_dir), o);
  for (int64_t s = from_step + 1; s <= o.step; ++s)
    if (!recorded.count(s))
      throw std::invalid_argument(fmt::format("{}: records no step {} (its steps: {} .. {}); --step {} cannot be "
                                              "compared",
                                              (run_dir / "metrics.jsonl").string(), s,
                                              history.steps.front().record.step, history.steps.back().record.step,
                                              o.step));

  if (o.out_dir.empty())
    o.out_dir = (run_dir / "replay" /
                 fmt::format("{}_{}_{}", o.counterfactual() ? "changed" : "run", from_step, o.step)).string();
  // The replay's config first: a bad change is refused before anything is written.
  const Config c = replay_config(run, o, checkpoint, from_step);
  const std::string placement = config::placement_text(c);
  const fs::path out(o.out_dir);
  if (fs::exists(out)) {
    if (fs::exists(run_dir) && fs::equivalent(out, run_dir))
      throw std::invalid_argument("--out " + o.out_dir + " is the run directory itself");
    if (!fs::is_directory(out) || !fs::exists(out / kMarker))
      throw std::invalid_argument(o.out_dir + ": exists and is no earlier replay's directory (no " + kMarker +
                                  "); give --out a new path");
    fs::remove_all(out);  // an earlier replay's scratch run, ours to replace
  }
  fs::create_directories(out);
  std::ofstream(out / kMarker) << "scratch run of supervisor replay " << o.run_dir << "\n";

  actors::RunOptions ro;
  ro.console = false;
  ro.timeout = std::chrono::seconds(o.timeout_s);
  ro.config_source = "replay of " + o.run_dir;
  google::protobuf::TextFormat::PrintToString(c, &ro.config_text);
  const actors::RunResult result = actors::run_training(c, ro);
  if (result.outcome.status != "completed")
    throw std::runtime_error(fmt::format("the recomputation in {} did not complete: {}", o.out_dir,
                                         result.outcome.error));

  std::map<int64_t, metrics::StepRecord> replayed;  // the final timeline: the last record of each step
  for (const auto& s : result.outcome.steps) replayed[s.step] = s;

  ReplayResult r;
  r.from_step = from_step;
  r.checkpoint = checkpoint;
  r.out_dir = o.out_dir;
  r.placement = placement;
  r.counterfactual = o.counterfactual();
  r.samples_compared = true;
  for (int64_t s = from_step + 1; s <= o.step; ++s) {
    if (!replayed.count(s))
      throw std::runtime_error(fmt::format("the recomputation in {} produced no step {}", o.out_dir, s));
    ReplayStep step{recorded.at(s), replayed.at(s)};
    r.samples_compared = r.samples_compared && step.recorded.samples_hash.has_value();
    if (!r.counterfactual && !r.first_difference) r.first_difference = difference(step.recorded, step.replayed);
    r.steps.push_back(std::move(step));
  }
  if (o.dump) {
    const std::string weights =
        o.step == 1 ? std::string()
        : from_step == o.step - 1
            ? checkpoint
            : (fs::path(c.checkpoint().dir()) / ckpt::step_dir_name(o.step - 1)).string();
    r.dump = dump_step(c, o.step, weights, (run_dir / "replay" / fmt::format("step_{}", o.step)).string());
  }
  if (!o.skip_samples.empty()) r.changes.push_back("--skip-samples " + join_ids(o.skip_samples));
  if (!o.skip_documents.empty())
    r.changes.push_back("--skip-documents " + join_ids(o.skip_documents));
  if (o.lr_scale != 1.0) r.changes.push_back(fmt::format("--lr-scale {}", o.lr_scale));
  if (o.clip) r.changes.push_back(fmt::format("--clip {}", *o.clip));
  for (const auto& s : o.sets) r.changes.push_back("--set " + s);
  return r;
}

std::string format_replay(const ReplayResult& r) {
  std::string out;
  const int64_t first = r.from_step + 1, last = r.steps.empty() ? r.from_step : r.steps.back().recorded.step;
  const std::string origin = r.checkpoint.empty() ? std::string("the initial weights")
                                                  : fmt::format("the checkpoint of step {} ({})", r.from_step,
                                                                r.checkpoint);
  if (r.counterfactual) {
    std::string changes;
    for (const auto& c : r.changes) changes += (changes.empty() ? "" : " ") + c;
    out += fmt::format("counterfactual replay: steps {}..{} from {} with {}\nscratch run: {}\n\n", first, last,
                       origin, changes, r.out_dir);
    out += fmt::format("{:>7}  {:>12}  {:>12}  {:>9}  {:>12}  {:>12}  {:>9}\n", "step", "loss (run)", "loss (new)",
                       "change", "grad (run)", "grad (new)", "change");
    for (const auto& s : r.steps) {
      auto rel = [](double a, double b) { return a != 0 ? fmt::format("{:+.1f}%", 100.0 * (b - a) / a) : "-"; };
      out += fmt::format("{:>7}  {:>12.6f}  {:>12.6f}  {:>9}  {:>12.6f}  {:>12.6f}  {:>9}\n", s.recorded.step,
                         s.recorded.loss, s.replayed.loss, rel(s.recorded.loss, s.replayed.loss),
                         s.recorded.grad_norm, s.replayed.grad_norm, rel(s.recorded.grad_norm, s.replayed.grad_norm));
    }
    return out;
  }
  out += fmt::format("replay: steps {}..{} from {}\nscratch run: {}\nplacement: {}\n\n", first, last, origin,
                     r.out_dir, r.placement);
  out += fmt::format("{:>7}  {:>20}  {:>20}  {:>20}  {:>20}  {}\n", "step", "loss (recorded)", "loss (replayed)",
                     "grad (recorded)", "grad (replayed)", "bitwise");
  for (const auto& s : r.steps) {
    const auto d = difference(s.recorded, s.replayed);
    out += fmt::format("{:>7}  {:>20.17g}  {:>20.17g}  {:>20.17g}  {:>20.17g}  {}\n", s.recorded.step,
                       s.recorded.loss, s.replayed.loss, s.recorded.grad_norm, s.replayed.grad_norm,
                       d ? "DIFFERS (" + d->quantity + ")" : std::string("equal"));
  }
  const std::string compared = r.samples_compared ? "consumed samples, sample IDs, loss tokens, grad norm, loss, lr"
                                                  : "consumed samples, loss tokens, grad norm, loss, lr (sample IDs "
                                                    "not recorded by this run)";
  if (r.first_difference) {
    const auto& d = *r.first_difference;
    out += fmt::format("\nDIFFERENT at step {}: {} recorded {}, replayed {}. The recomputation is not bitwise the "
                       "record: non-determinism, or a silent data corruption (in the run or here).\n",
                       d.step, d.quantity, d.recorded, d.replayed);
  } else {
    out += fmt::format("\nbitwise equal: steps {}..{} ({})\n", first, last, compared);
  }
  if (r.dump) out += format_dump(*r.dump);
  return out;
}

}  // namespace troupe::replay
