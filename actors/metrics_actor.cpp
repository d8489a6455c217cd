#include "actors/metrics_actor.h"

#include <chrono>
#include <cstdio>
#include <memory>

#include <fmt/format.h>

#include "actors/message_types.h"
#include "metrics/console.h"
#include "metrics/jsonl_log.h"
#include "metrics/tensorboard_writer.h"


namespace troupe::actors {
namespace {

struct MetricsState {
  MetricsArgs args;
  std::unique_ptr<metrics::JsonlLog> jsonl;
  std::unique_ptr<metrics::EventFileWriter> events;
  bool bar = false;          // a progress bar is drawn on the last line
  bool header_printed = false;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
};

using Self = caf::stateful_actor<MetricsState>;

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
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

caf::behavior metrics_impl(Self* self, MetricsArgs args) {
  auto& st = self->state;
  st.args = std::move(args);
  exit_on_exception(self, "metrics");
  st.jsonl = std::make_unique<metrics::JsonlLog>(st.args.layout.metrics);
  if (st.args.tensorboard) st.events = std::make_unique<metrics::EventFileWriter>(st.args.layout.events, unix_now());
  st.bar = st.args.console && st.args.progress_bar && metrics::is_terminal(stdout);
  return {
      [self](const metrics::StartupRecord& r) {
        self->state.jsonl->startup(r);
        if (self->state.events && r.resumed_from_step)
          self->state.events->session_start(*r.resumed_from_step + 1, r.wall_time);
      },
      [self](const metrics::StepRecord& r) {
        auto& s = self->state;
        engine::check_fault(s.args.faults.get(), "metrics", r.step, Fault::OPTIMIZER);
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
      [self](event_atom, const std::string& type, int64_t step, const std::string& json_text) {
        auto& s = self->state;
        if (type == "checkpoint") engine::check_fault(s.args.faults.get(), "metrics", step, Fault::CHECKPOINT_WRITE);
        auto object = metrics::Json::parse(json_text);
        object["type"] = type;
        object["step"] = step;
        s.jsonl->write(object, /*durable=*/true);
      },
      [self](const metrics::RunSummary& r) {
        auto& s = self->state;
        s.jsonl->summary(r);
        if (s.events) s.events->sync();
        if (s.bar) std::fputs("\r\033[2K", stdout);
        s.bar = false;
        if (s.args.console) {
          std::fputs(metrics::summary_block(r).c_str(), stdout);
          std::fflush(stdout);
        }
      },
  };
}

}  // namespace

caf::actor spawn_metrics(caf::event_based_actor* parent, MetricsArgs args) {
  return parent->spawn(metrics_impl, std::move(args));
}

}  // namespace troupe::actors
