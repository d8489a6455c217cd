// Rung 3, save / fail / recover (docs/acceptance.md, part "Fifth"), on the small model:
//   kill a stage: checkpoints every 2 updates, the last stage of the last replica
//     killed in the backward of update 4; the training group restarts from update
//     2's checkpoint and finishes. Against the same run without the fault: the next
//     sample IDs after the restart, every update's loss, LR, gradient norm, consumed
//     samples and sample IDs, the final weights and Adam moments, and the counters of
//     the final checkpoint's manifest, all bitwise;
//   stop and resume: 3 updates with a final checkpoint, then a second run resumed
//     from it to update 6: the same comparison for updates 4-6.
#include <chrono>
#include <filesystem>

#include <fmt/format.h>

#include "acceptance/measure.h"
#include "acceptance/rungs.h"
#include "acceptance/small_config.h"
#include "actors/runtime.h"
#include "ckpt/reader.h"
#include "engine/checkpointing.h"
#include "engine/faults.h"
#include "engine/topology.h"

namespace troupe::acceptance {
namespace {

constexpr int kUpdates = 6;

Config recovery_config(const LadderContext& ctx, const std::string& name, int updates) {
  Config c = for_run(ctx.small, ctx.runs_root, name, updates);
  // One schedule for every run of this rung, however many updates it trains.
  c.mutable_lr_schedule()->set_decay_samples(int64_t(kUpdates) * c.batch().global_batch_size());
  c.mutable_checkpoint()->set_interval_steps(2);
  // Committed before the next step, so the kill meets a complete checkpoint of step 2
  // however busy the machine is (writers run at the lowest priority).
  c.mutable_checkpoint()->set_max_lag_steps(0);
  c.mutable_checkpoint()->set_keep_last(10);
  c.mutable_checkpoint()->set_save_on_exit(true);
  c.mutable_supervision()->set_max_restarts(3);
  c.mutable_supervision()->set_step_watchdog_s(60);
  return c;
}

actors::RunResult run(const Config& c) {
  actors::RunOptions o;
  o.console = false;
  o.collect_state = true;
  o.timeout = std::chrono::seconds(600);
  return actors::run_training(c, o);
}

// Manifest counters of the newest complete checkpoint of a run, as one line.
std::string manifest_counters(const Config& c) {
  const auto latest = ckpt::load_latest(engine::checkpoint_root(c));
  if (!latest.checkpoint) return "no checkpoint";
  const auto& m = latest.checkpoint->manifest();
  return fmt::format("step {}, consumed samples {}, successful updates {}, skipped {}, LR-schedule samples {}, data "
                     "position {} (epoch {})",
                     m.step(), m.consumed_samples(), m.successful_updates(), m.skipped_updates(),
                     m.lr_schedule_samples(), m.data_position().consumed_samples(), m.data_position().epoch());
}

// The runtime's recovery timings, whichever phases it records.
template <class Recovery>
std::string describe_recovery(const Recovery& rec) {
  if constexpr (requires { rec.total_s(); })
    return fmt::format("{:.3f} s in all: detection {:.3f} s, restart {:.3f} s, reload {:.3f} s, first update {:.3f} s",
                       rec.total_s(), rec.detection_s, rec.restart_s, rec.reload_s, rec.rewarm_s);
  else
    return fmt::format("detection to restart {:.3f} s, restart to first update {:.3f} s", rec.detection_to_restart_s,
                       rec.restart_to_first_step_s);
}

int64_t differing_tensors(const std::map<std::string, std::vector<float>>& a,
                          const std::map<std::string, std::vector<float>>& b) {
  int64_t n = 0;
  for (const auto& [name, v] : a) {
    const auto it = b.find(name);
    n += it == b.end() || it->second != v;
  }
  return n + int64_t(b.size() > a.size() ? b.size() - a.size() : 0);
}

// Steps [from, to) of `got` against the same steps of `want` (matched by step
// number), and the final states. Adds checks to `s`.
void compare_runs(const actors::RunResult& got, const actors::RunResult& want, int64_t from_step, Section& s) {
  int64_t step_mismatch = 0, ids_mismatch = 0, compared = 0;
  for (size_t i = 0; i < got.outcome.steps.size(); ++i) {
    const auto& g = got.outcome.steps[i];
    if (g.step < from_step) continue;
    const size_t k = size_t(g.step - 1);
    if (k >= want.outcome.steps.size()) {
      ++step_mismatch;
      continue;
    }
    const auto& w = want.outcome.steps[k];
    ++compared;
    step_mismatch += g.loss != w.loss || g.lr != w.lr || g.grad_norm != w.grad_norm ||
                     g.consumed_samples != w.consumed_samples || g.skipped != w.skipped;
    ids_mismatch += i >= got.outcome.step_samples.size() || k >= want.outcome.step_samples.size() ||
                    got.outcome.step_samples[i] != want.outcome.step_samples[k];
  }
  s.checks.push_back(check_eq("updates compared", double(compared), double(kUpdates - from_step + 1)));
  s.checks.push_back(check_eq("updates whose loss, LR, gradient norm or consumed samples differ (bitwise)",
                              double(step_mismatch), 0));
  s.checks.push_back(check_eq("updates whose sample IDs differ", double(ids_mismatch), 0));
  if (!got.state || !want.state) {
    s.checks.push_back(check_true("final state collected from both runs", false));
    return;
  }
  s.checks.push_back(check_eq("weight tensors that differ (bitwise)",
                              double(differing_tensors(got.state->params, want.state->params)), 0));
  s.checks.push_back(check_eq("Adam first-moment tensors that differ (bitwise)",
                              double(differing_tensors(got.state->exp_avg, want.state->exp_avg)), 0));
  s.checks.push_back(check_eq("Adam second-moment tensors that differ (bitwise)",
                              double(differing_tensors(got.state->exp_avg_sq, want.state->exp_avg_sq)), 0));
  s.checks.push_back(check_eq("Adam step counter", double(got.state->adam_steps), double(want.state->adam_steps)));
  s.checks.push_back(check_eq("consumed samples at the end", double(got.outcome.summary.consumed_samples),
                              double(want.outcome.summary.consumed_samples)));
}

}  // namespace

std::vector<Section> save_recover(const LadderContext& ctx) {
  std::vector<Section> out;
  const auto t_clean = std::chrono::steady_clock::now();
  const Config clean_cfg = recovery_config(ctx, "recover-clean", kUpdates);
  const auto clean = run(clean_cfg);
  const double clean_s = seconds_since(t_clean);
  const std::string clean_counters = manifest_counters(clean_cfg);

  {
    const auto t0 = std::chrono::steady_clock::now();
    Section s;
    s.name = "kill a stage, recover";
    s.purpose =
        "Checkpoints every 2 updates; a stage is killed in update 4's backward; the group restarts from the latest "
        "checkpoint. Next sample IDs, LR, counters, weights and optimizer moments must equal the uninterrupted run.";
    s.checks.push_back(check_true("the uninterrupted run completed", clean.outcome.status == "completed"));
    Config c = recovery_config(ctx, "recover-kill", kUpdates);
    const auto& p = c.parallel();
    const std::string victim = engine::stage_path({p.data() - 1, p.pipeline() - 1, 0});
    auto* f = c.mutable_faults()->add_fault();
    f->set_actor(victim);
    f->set_step(4);
    f->set_phase(Fault::BACKWARD);
    f->set_kind(Fault::KILL);
    const auto r = run(c);
    s.checks.push_back(check_true("the run with the fault completed", r.outcome.status == "completed"));
    s.checks.push_back(check_eq("training-group restarts", double(r.restarts), 1));
    const bool named = !r.failures.empty() && r.failures[0].actor == victim;
    s.checks.push_back(check_true("the failure names " + victim, named));
    // The checkpoint the group resumed from: the update before the first one done
    // again (the runtime marks those `recomputed`).
    int64_t resumed = -1;
    for (const auto& st : r.outcome.steps)
      if (st.recomputed && (resumed < 0 || st.step - 1 < resumed)) resumed = st.step - 1;
    s.checks.push_back(check_eq("checkpoint step the group resumed after (update before the first recomputed one)",
                                double(resumed), 2));
    // The next sample IDs: the first update after the restart.
    bool next_ids = false;
    for (size_t i = 0; i < r.outcome.steps.size(); ++i)
      if (r.outcome.steps[i].step == resumed + 1 && size_t(resumed) < clean.outcome.step_samples.size() &&
          i < r.outcome.step_samples.size())
        next_ids = r.outcome.step_samples[i] == clean.outcome.step_samples[size_t(resumed)];
    s.checks.push_back(check_true("sample IDs of the first update after the restart equal the uninterrupted run's",
                                  next_ids));
    compare_runs(r, clean, 1, s);
    const std::string counters = manifest_counters(c);
    s.checks.push_back(check_true("final checkpoint's manifest counters equal the uninterrupted run's",
                                  counters == clean_counters && counters != "no checkpoint"));
    s.notes.push_back("final manifest: " + counters);
    if (!r.failures.empty()) s.notes.push_back(fmt::format("failure: {} in {}: {}", r.failures[0].actor,
                                                           r.failures[0].phase, r.failures[0].reason));
    s.notes.push_back(fmt::format("recomputed updates: {}", r.recomputed_steps));
    for (const auto& rec : r.recoveries) s.notes.push_back("recovery: " + describe_recovery(rec));
    s.seconds = seconds_since(t0) + clean_s;
    s.decide();
    out.push_back(std::move(s));
  }
  {
    const auto t0 = std::chrono::steady_clock::now();
    Section s;
    s.name = "stop and resume";
    s.purpose = "3 updates with a final checkpoint, then a new run resumed from it to update 6: updates 4-6, weights, "
                "moments and counters must equal the uninterrupted run.";
    Config first = recovery_config(ctx, "resume-first", 3);
    first.mutable_checkpoint()->set_interval_steps(0);
    const auto a = run(first);
    s.checks.push_back(check_true("the first run completed", a.outcome.status == "completed"));
    Config second = recovery_config(ctx, "resume-second", kUpdates);
    second.mutable_checkpoint()->set_dir(engine::checkpoint_root(first));
    second.mutable_checkpoint()->set_load("latest");
    second.mutable_checkpoint()->set_interval_steps(0);
    const auto b = run(second);
    s.checks.push_back(check_true("the resumed run completed", b.outcome.status == "completed"));
    s.checks.push_back(check_eq("first update of the resumed run", b.outcome.steps.empty() ? -1 : double(b.outcome.steps[0].step), 4));
    compare_runs(b, clean, 4, s);
    const std::string counters = manifest_counters(second);
    s.checks.push_back(check_true("final checkpoint's manifest counters equal the uninterrupted run's",
                                  counters == clean_counters && counters != "no checkpoint"));
    s.notes.push_back("final manifest: " + counters);
    s.seconds = seconds_since(t0);
    s.decide();
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace troupe::acceptance
