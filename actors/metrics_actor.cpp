#include "actors/metrics_actor.h"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>

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
  // The record being written, in file writes: one retried after a write failed (a full
  // disk) skips the writes that already succeeded, so no line is written twice.
  int writes_done = 0, writes_seen = 0;
  bool blocked = false;        // the oldest record's write failed; a retry is scheduled
  bool stop_asked = false;     // the coordinator was told the records cannot be written
  std::optional<metrics::SpikeRecord> spike;  // the spike of the StepExtras being written, if any
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
};

using Self = metrics_actor::stateful_base<MetricsState>;

// How long a record that could not be written waits before it is tried again (records
// posted meanwhile try it at once).
constexpr std::chrono::seconds kRetryWrite{1};

// One file write of the record being handled: skipped when a try of the same record
// already did it (see MetricsState::writes_done).
template <class Write>
void write_once(Self* self, Write&& write) {
  auto& st = self->state;
  if (st.writes_seen++ < st.writes_done) return;
  write();
  ++st.writes_done;
}

// The calendar from the measured throughput (docs/planner.md, "Calendar"):
// the step-time rate excludes checkpoint waits and evaluation, so the calendar
// efficiency is applied to it once; the wall-clock rate already includes every
// loss, so it is not applied again.
std::string calendar_lines(const MetricsArgs& a, const metrics::RunSummary& r) {
  const double step_rate = metrics::tokens_per_second(r);
  const double real_tokens = double(r.input_tokens - r.padding_tokens);
  const double wall_rate = r.elapsed_s > 0 ? real_tokens / r.elapsed_s : 0;
  if (step_rate <= 0) return {};
  const auto& plan = a.tokens;
  const double eff = a.calendar_efficiency;
  const auto at_step = sched::calendar(double(plan.budget), step_rate, eff);
  const auto at_wall = sched::calendar(double(plan.budget), wall_rate, 1.0);
  return fmt::format(
      "calendar: {:.4g} tokens ({}) at {:.4g} tok/s of step time = {:.4g} days of compute, {:.4g} days at {:.0f}% "
      "calendar efficiency;\n          at the wall-clock rate {:.4g} tok/s (losses included) = {:.4g} days, no "
      "efficiency applied again\n",
      double(plan.budget), plan.budget_derived ? "train tokens rounded up" : "training.token_budget", step_rate,
      at_step.compute_days, at_step.calendar_days, 100 * eff, wall_rate, at_wall.calendar_days);
}

void event_line(Self* self, const std::string& type, int64_t step, metrics::Json fields);

// The console is a view of the run, not the run: once standard output is gone (a closed
// pipe, `supervisor run | head`; SIGPIPE is ignored, so writes fail with EPIPE) console
// output stops, said once in metrics.jsonl, and training goes on.
void check_console(Self* self) {
  auto& st = self->state;
  if (!std::ferror(stdout)) return;
  const int err = errno;
  std::clearerr(stdout);
  st.args.console = false;
  st.bar = false;
  const std::string why = err == EPIPE ? "standard output was closed (broken pipe)"
                                       : std::string("standard output: ") + std::strerror(err);
  event_line(self, "console_closed", 0, {{"reason", why + "; console output stopped, the run goes on"}});
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
  check_console(self);
}

void write_step(Self* self, const metrics::StepRecord& r) {
  auto& s = self->state;
  write_once(self, [&] { s.jsonl->step(r); });
  if (s.events) write_once(self, [&] { s.events->step(r); });
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

// A record could not be written (metrics::MetricsError: a full disk, a file system
// gone read-only): it stays in the inbox with every later one, and is tried again in
// kRetryWrite or when the next record arrives. Said once while it lasts; past
// logging.max_unwritten_records waiting, the coordinator is told to stop the run.
void write_failed(Self* self, const std::string& why) {
  auto& st = self->state;
  const size_t waiting = st.args.inbox->size();
  st.args.inbox->set_blocked(why);
  if (!st.blocked) {
    spdlog::error("metrics: {}; the run's records wait in memory until they can be written (at most {})", why,
                  st.args.max_unwritten_records);
    self->delayed_send(self, kRetryWrite, drain_atom::value);
  }
  st.blocked = true;
  if (!st.stop_asked && int64_t(waiting) >= st.args.max_unwritten_records && st.args.directory) {
    st.stop_asked = true;
    const auto error = fmt::format("{} record(s) of the run could not be written (logging.max_unwritten_records = {}): "
                                   "{}",
                                   waiting, st.args.max_unwritten_records, why);
    if (auto c = st.args.directory->get(engine::coordinator_path()))
      caf::anon_send(typed_handle<coordinator_actor>(c), storage_failed_atom::value, error);
  }
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
// for this actor's successor; one whose file write fails stays for a retry.
void drain(Self* self) {
  auto& st = self->state;
  while (auto record = st.args.inbox->front(st.owner)) {
    st.writes_seen = 0;
    try {
      st.records(*record);
    } catch (const metrics::MetricsError& e) {
      return write_failed(self, e.what());
    }
    st.args.inbox->pop(st.owner);
    st.writes_done = 0;
  }
  if (st.blocked) {
    st.blocked = false;
    st.args.inbox->set_blocked({});
    spdlog::info("metrics: the waiting records are written");
  }
}

// A line of this actor's own for metrics.jsonl, written after the records before it.
void event_line(Self* self, const std::string& type, int64_t step, metrics::Json fields) {
  self->state.args.inbox->post(caf::make_message(event_atom::value, type, step, unix_now(), fields.dump()));
  self->send(self, drain_atom::value);
}

metrics_actor::behavior_type metrics_impl(Self* self, MetricsArgs args) {
  auto& st = self->state;
  st.args = std::move(args);
  exit_on_exception(self, "metrics");
  st.jsonl = std::make_unique<metrics::JsonlLog>(st.args.layout.metrics);
  if (st.args.tensorboard) st.events = std::make_unique<metrics::EventFileWriter>(st.args.layout.events, unix_now());
  st.bar = st.args.console && st.args.progress_bar && metrics::is_terminal(stdout);
  st.detector = std::make_unique<metrics::SpikeDetector>(st.args.spikes);
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
        write_once(self, [&] { s.jsonl->startup(r); });
        if (s.events && r.resumed_from_step)
          write_once(self, [&] { log_superseded(s.events->session_start(*r.resumed_from_step + 1, r.wall_time)); });
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
        if (s.events) write_once(self, [&] { log_superseded(s.events->session_start(step + 1, wall_time)); });
        s.detector->clear_windows();
        try {
          metrics::warm_spike_windows(metrics::read_jsonl(s.args.layout.metrics).objects, step, *s.detector);
        } catch (const metrics::MetricsError& e) {
          spdlog::warn("spike detection starts again with empty windows: {}", e.what());
        }
      },
      [self](const StepExtras& x) {
        auto& s = self->state;
        // Observed once: a retry after a failed write must not feed the windows twice.
        write_once(self, [&] { s.spike = s.detector->observe(x.detail); });
        if (s.spike) {
          write_once(self, [&] { s.spikes->write(metrics::to_json(*s.spike), /*durable=*/true); });
          ++s.spike_count;
          print_line(self, metrics::spike_line(*s.spike, s.args.layout.spikes), x.detail.step);
        }
        for (size_t k = 0; k < x.timings.size() && k < x.stage_paths.size(); ++k) {
          const auto& t = x.timings[k];
          for (const auto& [a, b] : t.busy) s.timings.compute(x.stage_paths[k], b - a);
          for (double w : t.waits) s.timings.wait(x.stage_paths[k], w);
        }
      },
      [self](const metrics::EvalRecord& r) {
        auto& s = self->state;
        write_once(self, [&] { s.jsonl->eval(r); });
        if (s.events) write_once(self, [&] { s.events->eval(r); });
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
        write_once(self, [&] { s.jsonl->write(line, /*durable=*/true); });
      },
      [self](metrics::RunSummary r) {
        auto& s = self->state;
        r.spikes = s.spike_count;
        const auto report = metrics::straggler_report(s.timings);
        const std::string calendar = calendar_lines(s.args, r);
        write_once(self, [&] { s.jsonl->summary(r); });
        if (s.events) write_once(self, [&] { s.events->sync(); });
        if (s.bar) std::fputs("\r\033[2K", stdout);
        s.bar = false;
        if (s.args.console) {
          std::fputs(metrics::summary_block(r).c_str(), stdout);
          if (!report.actors.empty()) std::fputs(metrics::format_straggler_report(report).c_str(), stdout);
          std::fputs(calendar.c_str(), stdout);
          std::fflush(stdout);
          check_console(self);
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
