#include "metrics/console.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdarg>

#include "metrics/human_units.h"

namespace troupe::metrics {
namespace {

// Column widths of the step table, shared by the header and the lines.
constexpr int kStep = 7, kSamples = 10, kLoss = 9, kLr = 10, kNorm = 11, kFlag = 6, kRate = 13, kLossTok = 10,
              kPad = 9;

std::string fmt(const char* format, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char* format, ...) {
  char buf[256];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buf, sizeof buf, format, args);
  va_end(args);
  return buf;
}

std::string fixed(double v, int decimals) {
  if (!std::isfinite(v)) return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
  return fmt("%.*f", decimals, v);
}

// Grad norms span orders of magnitude: plain decimals while short, exponent beyond.
std::string norm_text(double v) {
  if (std::isfinite(v) && std::fabs(v) >= 1e5) return fmt("%.3e", v);
  return fixed(v, 4);
}

}  // namespace

std::string step_header() {
  return fmt("%*s %*s %*s %*s %*s %*s %*s %*s %*s %*s", kStep, "step", kSamples, "samples", kLoss, "loss", kLr, "lr",
             kNorm, "grad_norm", kFlag, "clip", kFlag, "skip", kRate, "tok/s", kLossTok, "loss_tok", kPad, "padding");
}

std::string step_line(const StepRecord& r) {
  const std::string loss = fixed(r.loss, 4);
  const std::string lr = std::isfinite(r.lr) ? fmt("%.3e", r.lr) : fixed(r.lr, 0);
  const std::string norm = norm_text(r.grad_norm);
  const std::string rate = format_si(tokens_per_second(r));
  std::string line = fmt("%*lld %*lld %*s %*s %*s %*s %*s %*s %*lld %*lld", kStep, static_cast<long long>(r.step),
                         kSamples, static_cast<long long>(r.consumed_samples), kLoss, loss.c_str(), kLr, lr.c_str(),
                         kNorm, norm.c_str(), kFlag, r.clipped ? "yes" : "-", kFlag, r.skipped ? "yes" : "-", kRate,
                         rate.c_str(), kLossTok, static_cast<long long>(r.loss_tokens), kPad,
                         static_cast<long long>(r.padding_tokens));
  if (r.recomputed) line += "  (recomputed)";
  return line;
}

std::string progress_bar(int64_t done, int64_t total, double elapsed_s, int bar_width) {
  if (total < 1) total = 1;
  if (done < 0) done = 0;
  if (done > total) done = total;
  if (bar_width < 1) bar_width = 1;
  const double frac = double(done) / double(total);
  // Cells filled: rounded down, so the bar is full only when the run is.
  const int filled = int(std::floor(frac * bar_width));
  std::string bar(size_t(bar_width) + 2, '.');
  bar.front() = '[';
  bar.back() = ']';
  std::fill_n(bar.begin() + 1, filled, '#');
  const std::string eta = done > 0 ? format_duration(elapsed_s / double(done) * double(total - done)) : "--";
  const int digits = int(std::to_string(total).size());
  return fmt("%s  %*lld/%lld  %5.1f%%  %s elapsed  ETA %s", bar.c_str(), digits, static_cast<long long>(done),
             static_cast<long long>(total), 100.0 * frac, format_duration(elapsed_s).c_str(), eta.c_str());
}

bool is_terminal(std::FILE* f) { return f != nullptr && ::isatty(::fileno(f)) == 1; }

std::string summary_block(const RunSummary& s) {
  std::string out;
  out += fmt("run %s: %lld steps (%lld skipped, %lld clipped), %s samples consumed\n", s.status.c_str(),
             static_cast<long long>(s.steps), static_cast<long long>(s.skipped_steps),
             static_cast<long long>(s.clipped_steps), format_thousands(s.consumed_samples).c_str());
  out += "tokens: " + format_thousands(s.input_tokens) + " input, " + format_thousands(s.loss_tokens) +
         " loss-bearing, " + format_thousands(s.padding_tokens) + " padding\n";
  out += "loss: " + fixed(s.first_loss, 4) + " -> " + fixed(s.last_loss, 4);
  if (s.last_eval_loss) out += " (last eval " + fixed(*s.last_eval_loss, 4) + ")";
  out += "\n";
  out += "throughput: " + format_rate(tokens_per_second(s)) + " over " + format_duration(s.train_time_s) +
         " of steps (wall " + format_duration(s.elapsed_s) + ")\n";
  out += fmt("restarts: %lld, spikes: %lld", static_cast<long long>(s.restarts), static_cast<long long>(s.spikes));
  if (s.rollbacks > 0) out += fmt(", rollbacks: %lld", static_cast<long long>(s.rollbacks));
  out += "\n";
  if (!s.newest_checkpoint.empty()) out += "newest complete checkpoint: " + s.newest_checkpoint + "\n";
  if (!s.error.empty()) out += "error: " + s.error + "\n";
  return out;
}

}  // namespace troupe::metrics
