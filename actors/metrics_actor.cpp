#include "actors/metrics_actor.h"

#include <chrono>
#include <cstdio>
#include <limits>
#include <memory>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/message_types.h"
#include "actors/unix_time.h"
#include "metrics/console.h"
#include "metrics/error.h"
#include "metrics/jsonl_log.h"
#include "metrics/straggler.h"
#include "metrics/tensorboard_writer.h"
#include "sched/planner.h"


namespace troupe::actors {
namespace {

struct MetricsState {
  MetricsArgs args;
  std::unique_ptr<metrics::JsonlLog> jsonl, spikes;
  std::unique_ptr<metrics::SpikeDetector> detector;
  int64_t spike_count = 0;
  metrics::TimingLog timings;
  std::unique_ptr<metrics::EventFileWriter> events;
  bool bar = false;          // a progress bar is drawn on the last line
  bool header_printed = false;
  uint64_t owner = 0;  // this actor's claim on the inbox
  caf::message_handler records;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
};

using Self = metrics_actor::stateful_base<MetricsState>;

// The calendar from the measured throughput (docs/planner.md, "Calendar"):
// the step-time rate excludes checkpoint waits and evaluation, so the calendar
// efficiency is applied to it once; the wall-clock rate already includes every
// loss, so it is not applied again.
std::string calendar_lines(const Config& c, const metrics::RunSummary& r) {
  const double step_rate = metrics::tokens_per_second(r);
  const double real_tokens = double(r.input_tokens - r.padding_tokens);
  const double wall_rate = r.elapsed_s > 0 ? real_tokens / r.elapsed_s : 0;
  if (step_rate <= 0) return {};
  const auto plan = sched::token_plan(c);
  const double eff = c.logging().calendar_efficiency();
  const auto at_step = sched::calendar(double(plan.budget), step_rate, eff);
  const auto at_wall = sched::calendar(double(plan.budget), wall_rate, 1.0);
  return fmt::format(
      "calendar: {:.4g} tokens ({}) at {:.4g} tok/s of step time = {:.4g} days of compute, {:.4g} days at {:.0f}% "
      "calendar efficiency;\n          at the wall-clock rate {:.4g} tok/s (losses included) = {:.4g} days, no "
      "efficiency applied again\n",
      double(plan.budget), plan.budget_derived ? "train tokens rounded up" : "training.token_budget", step_rate,
      at_step.compute_days, at_step.calendar_days, 100 * eff, wall_rate, at_wall.calendar_days);
}

// Writes a line to the console above the progress bar, then redraws the bar.
void print_line(Self* self, const std::string& line, int64_t done) {
  auto& st = self->state;
  if (!st.args.console) return;
  if (st.bar) std::fputs("\r\033[2K", stdout);
  if (!line.empty()) std::printf("%s\n", line.c_str());
  if (st.bar && st.args.total_steps > 0) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - st.start).count();
    std::fputs(metrics::progress_bar(done, st.args.total_steps, elapsed).c_str(), stdout);
  }
  std::fflush(stdout);
}

void write_step(Self* self, const metrics::StepRecord& r) {
  auto& s = self->state;
  s.jsonl->step(r);
  if (s.events) s.events->step(r);
  std::string line;
  if (!s.header_printed) {
    line = metrics::step_header() + "\n";
    s.header_printed = true;
  }
  if (s.args.log_interval <= 1 || r.step % s.args.log_interval == 0 || r.step == s.args.total_steps)
    line += metrics::step_line(r);
  else if (line.size() > 0)
    line.pop_back();
  print_line(self, line, r.step);
}

// What a restart marker cut from the earlier event files (metrics/superseded_events.h),
// and the files it had to leave as they were.
void log_superseded(const metrics::SupersededEvents& cut) {
  for (const auto& temp : cut.removed_temporaries)
    spdlog::info("removed {}: a stale temporary copy of an event file", temp);
  for (const auto& c : cut.rewritten) {
    std::string what;
    if (c.dropped_points > 0)
      what = fmt::format("{} point{} of steps {}-{} that the restart supersedes", c.dropped_points,
                         c.dropped_points == 1 ? "" : "s", c.first_dropped_step, c.last_dropped_step);
    if (c.dropped_tail_bytes > 0)
      what += fmt::format("{}a torn last record ({} bytes)", what.empty() ? "" : " and ", c.dropped_tail_bytes);
    spdlog::info("{}: dropped {} (metrics.jsonl keeps every step)", c.path, what);
  }
  for (const auto& w : cut.warnings) spdlog::warn("event file not cut to the restart: {}", w);
}

// Writes every record waiting in the inbox, oldest first. A record leaves the inbox
// only once it is written: one whose writing throws (an injected fault) or hangs stays
// for this actor's successor.
void drain(Self* self) {
  auto& st = self->state;
  while (auto record = st.args.inbox->front(st.owner)) {
    st.records(*record);
    st.args.inbox->pop(st.owner);
  }
}

metrics_actor::behavior_type metrics_impl(Self* self, MetricsArgs args) {
  auto& st = self->state;
  st.args = std::move(args);
  exit_on_exception(self, "metrics");
  st.jsonl = std::make_unique<metrics::JsonlLog>(st.args.layout.metrics);
  if (st.args.tensorboard) st.events = std::make_unique<metrics::EventFileWriter>(st.args.layout.events, unix_now());
  st.bar = st.args.console && st.args.progress_bar && metrics::is_terminal(stdout);
  const auto& lc = st.args.config.logging();
  st.detector = std::make_unique<metrics::SpikeDetector>(
      metrics::SpikeOptions{lc.spike_window(), lc.spike_min_history(), lc.spike_mad_k(), lc.spike_loss_min_jump(),
                            lc.spike_grad_norm_min_jump()});
  metrics::load_spike_history(st.args.layout.spikes, *st.detector);
  st.spikes = std::make_unique<metrics::JsonlLog>(st.args.layout.spikes);
  st.records = caf::message_handler{
      [self](const metrics::StartupRecord& r) {
        // A resumed run's spike windows start where its checkpoint left them (read
        // before this process's startup line; once, not again after a group restart).
        // An unreadable history costs the windows, not the run.
        auto& s = self->state;
        if (r.resumed_from_step && s.detector->history() == 0) {
          try {
            metrics::warm_spike_windows(metrics::read_jsonl(s.args.layout.metrics).objects, *r.resumed_from_step,
                                        *s.detector);
          } catch (const metrics::MetricsError& e) {
            spdlog::warn("spike detection starts with empty windows: {}", e.what());
          }
        }
        self->state.jsonl->startup(r);
        if (self->state.events && r.resumed_from_step)
          log_superseded(self->state.events->session_start(*r.resumed_from_step + 1, r.wall_time));
      },
      [self](const metrics::StepRecord& r) {
        engine::check_fault(self->state.args.faults.get(), "metrics", r.step, Fault::OPTIMIZER);
        write_step(self, r);
      },
      // The training group restarted from the checkpoint of `step` (0: from scratch):
      // the steps after it are done again. TensorBoard's readers drop the points at or
      // after a SessionLog START's step, so each step shows once (earlier event files
      // are cut to it for the readers that take each file alone). The spike windows
      // start again from the steps up to `step` as metrics.jsonl holds them (the last
      // line of each step: every record before this marker is written), so spikes.jsonl
      // judges the new timeline as the coordinator's guard does (engine/spike_guard.h).
      [self](restart_marker_atom, int64_t step, double wall_time) {
        auto& s = self->state;
        if (s.events) log_superseded(s.events->session_start(step + 1, wall_time));
        s.detector->clear_windows();
        try {
          metrics::warm_spike_windows(metrics::read_jsonl(s.args.layout.metrics).objects, step, *s.detector);
        } catch (const metrics::MetricsError& e) {
          spdlog::warn("spike detection starts again with empty windows: {}", e.what());
        }
      },
      [self](const StepExtras& x) {
        auto& s = self->state;
        if (auto spike = s.detector->observe(x.detail)) {
          ++s.spike_count;
          s.spikes->write(metrics::to_json(*spike), /*durable=*/true);
          print_line(self, metrics::spike_line(*spike, s.args.layout.spikes), x.detail.step);
        }
        for (size_t k = 0; k < x.timings.size() && k < x.stage_paths.size(); ++k) {
          const auto& t = x.timings[k];
          for (const auto& [a, b] : t.busy) s.timings.compute(x.stage_paths[k], b - a);
          for (double w : t.waits) s.timings.wait(x.stage_paths[k], w);
        }
      },
      [self](const metrics::EvalRecord& r) {
        auto& s = self->state;
        s.jsonl->eval(r);
        if (s.events) s.events->eval(r);
        print_line(self, fmt::format("eval after step {}: loss {:.4f} over {} samples ({} loss-bearing tokens)",
                                     r.step, r.loss, r.samples, r.loss_tokens),
                   r.step);
      },
      [self](const metrics::FailureRecord& r) { self->state.jsonl->failure(r); },
      [self](event_atom, const std::string& type, int64_t step, double wall_time, const std::string& json_text) {
        auto& s = self->state;
        if (type == "checkpoint") engine::check_fault(s.args.faults.get(), "metrics", step, Fault::CHECKPOINT_WRITE);
        // "type" and "time" first, as on every line (docs/metrics.md).
        metrics::Json line = {{"type", type}, {"time", wall_time}, {"step", step}};
        line.update(metrics::Json::parse(json_text));
        s.jsonl->write(line, /*durable=*/true);
      },
      [self](metrics::RunSummary r) {
        auto& s = self->state;
        r.spikes = s.spike_count;
        const auto report = metrics::straggler_report(s.timings);
        const std::string calendar = calendar_lines(s.args.config, r);
        s.jsonl->summary(r);
        if (s.events) s.events->sync();
        if (s.bar) std::fputs("\r\033[2K", stdout);
        s.bar = false;
        if (s.args.console) {
          std::fputs(metrics::summary_block(r).c_str(), stdout);
          if (!report.actors.empty()) std::fputs(metrics::format_straggler_report(report).c_str(), stdout);
          std::fputs(calendar.c_str(), stdout);
          std::fflush(stdout);
        }
      },
  };
  st.owner = st.args.inbox->claim();
  self->send(self, drain_atom::value);  // what was posted before it started, or while none ran
  return {
      [self](drain_atom) { drain(self); },
      [](ping_atom) { return pong_atom::value; },
  };
}

}  // namespace

void post_metrics(MetricsInbox& inbox, const Directory& directory, caf::message record) {
  inbox.post(std::move(record));
  if (auto metrics = directory.get(engine::metrics_path()))
    caf::anon_send(typed_handle<metrics_actor>(metrics), drain_atom::value);
}

metrics_actor spawn_metrics(caf::event_based_actor* parent, MetricsArgs args) {
  // Detached: a metrics actor that hangs (a stuck file system) holds its own thread,
  // not one of the scheduler's, while its supervisor replaces it.
  return parent->spawn<caf::detached>(metrics_impl, std::move(args));
}

}  // namespace troupe::actors
