// Rung 4, the calendar (docs/acceptance.md, part "Put measured speed back on the
// calendar"): steady throughput measured over a window of updates after a warm-up,
// then days to the config's token budget with sched::calendar, the calendar
// efficiency (logging.calendar_efficiency) applied once: the throughput is non-padding
// input tokens per second of step time, which excludes checkpoints, evaluation and
// restarts, so those losses are what the efficiency stands for.
//
// For the small model always; for the config's own model only when it was measured
// itself (it is small enough for this CPU: acceptance::cpu_sized). The small model's
// speed is never scaled up to the config's model: tokens per second depend on width,
// sequence length, kernels, devices and interconnect, none of which the planner models.
#include <chrono>
#include <cmath>

#include <fmt/format.h>

#include "acceptance/measure.h"
#include "acceptance/rungs.h"
#include "acceptance/small_config.h"
#include "actors/runtime.h"
#include "metrics/human_units.h"
#include "sched/planner.h"

namespace troupe::acceptance {
namespace {

constexpr int kWarmup = 2;
constexpr int kWindow = 4;

void measure_calendar(const Config& run_config, const Config& budget_config, Section& s) {
  const Config c = run_config;
  actors::RunOptions o;
  o.console = false;
  o.timeout = std::chrono::seconds(600);
  const auto r = actors::run_training(c, o);
  s.checks.push_back(check_true("the run completed", r.outcome.status == "completed"));
  const auto w = window_throughput(r.outcome.steps, kWarmup);
  s.checks.push_back(check_eq("updates in the measurement window", double(w.updates), kWindow));
  s.checks.push_back(check_eq("skipped updates in the window", double(w.skipped), 0));
  s.checks.push_back(check_eq("restarts during the run", double(r.restarts), 0));
  s.checks.push_back(check_true("throughput measured (positive, finite)", w.tokens_per_s > 0 && std::isfinite(w.tokens_per_s)));
  if (!(w.tokens_per_s > 0)) return;
  const auto plan = sched::token_plan(budget_config);
  const double eff = budget_config.logging().calendar_efficiency();
  const auto cal = sched::calendar(double(plan.budget), w.tokens_per_s, eff);
  s.notes.push_back(fmt::format(
      "throughput: {} = {} non-padding input tokens / {:.3f} s of step time over updates {}-{} after {} warm-up "
      "updates (median step {:.3f} s; {} padding tokens left out; no checkpoints or evaluation in the run)",
      metrics::format_rate(w.tokens_per_s), metrics::format_thousands(w.real_tokens), w.step_seconds, w.first_step,
      w.last_step, kWarmup, w.median_step_s, metrics::format_thousands(w.padding_tokens)));
  s.notes.push_back(fmt::format("token budget: {}{}", metrics::format_thousands(plan.budget),
                                plan.budget_derived ? " (train_samples x seq_length rounded up to 2 significant figures)"
                                                    : " (training.token_budget)"));
  s.notes.push_back(fmt::format("calendar: {:.4g} days of pure compute ({}), {:.4g} calendar days at {:g}% efficiency "
                                "({}; applied once)",
                                cal.compute_days, metrics::format_duration(cal.compute_days * 86400.0),
                                cal.calendar_days, eff * 100, metrics::format_duration(cal.calendar_days * 86400.0)));
}

}  // namespace

std::vector<Section> calendar(const LadderContext& ctx) {
  std::vector<Section> out;
  {
    const auto t0 = std::chrono::steady_clock::now();
    Section s;
    s.name = "small model";
    s.purpose = "Steady tokens/s of the small model in the config's layout, and the days it would need for the "
                "config's token budget.";
    measure_calendar(for_run(ctx.small, ctx.runs_root, "calendar-small", kWarmup + kWindow), ctx.config, s);
    s.seconds = seconds_since(t0);
    s.decide();
    out.push_back(std::move(s));
  }
  {
    const auto t0 = std::chrono::steady_clock::now();
    Section s;
    s.name = "the config's own model";
    s.purpose = "Steady tokens/s of the config's own model and layout on this machine, and its calendar.";
    const Config& c = ctx.config;
    std::string why;
    if (!cpu_sized(c, &why)) {
      s.status = Status::kNotAvailable;
      s.notes.push_back("not measured: the model is too large for this CPU (" + why +
                        "). No extrapolation from the small model: its tokens/s on this CPU says nothing about the "
                        "config's model on its devices (width, sequence, kernels and interconnect set the speed; the "
                        "planner does not model them). Measure the target with `supervisor scaling` on its machines "
                        "and pass the result to `supervisor plan --throughput`.");
      out.push_back(std::move(s));
      return out;
    }
    measure_calendar(for_run(c, ctx.runs_root, "calendar-config", kWarmup + kWindow), ctx.config, s);
    s.seconds = seconds_since(t0);
    s.decide();
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace troupe::acceptance
