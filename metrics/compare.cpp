#include "metrics/compare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "metrics/human_units.h"

namespace troupe::metrics {
namespace {

int64_t tokens_of(const RunPosition& p, TokenAxis axis) {
  return axis == TokenAxis::Input ? p.input_tokens : p.loss_tokens;
}

std::optional<EvalAt> eval_at(const RunHistory& h, int64_t tokens, TokenAxis axis) {
  const HistoryEval* below = nullptr;
  for (const auto& e : h.evals) {
    const int64_t t = tokens_of(e.at, axis);
    if (t == tokens) return EvalAt{e.loss, false};
    if (t < tokens) below = &e;
    if (t > tokens) {
      if (!below) return std::nullopt;
      const double t0 = double(tokens_of(below->at, axis)), t1 = double(t);
      const double w = (double(tokens) - t0) / (t1 - t0);
      return EvalAt{below->loss + w * (e.loss - below->loss), true};
    }
  }
  return std::nullopt;
}

// `n` of the sorted values, evenly spaced, the first and last always kept.
std::vector<int64_t> thin(const std::vector<int64_t>& v, int n) {
  if (n < 2 || int(v.size()) <= n) return v;
  std::vector<int64_t> out;
  for (int i = 0; i < n; ++i) {
    const size_t k = size_t(std::llround(double(i) * double(v.size() - 1) / double(n - 1)));
    if (out.empty() || out.back() != v[k]) out.push_back(v[k]);
  }
  return out;
}

std::string pad(const std::string& s, size_t width, bool left = false) {
  if (s.size() >= width) return s;
  return left ? s + std::string(width - s.size(), ' ') : std::string(width - s.size(), ' ') + s;
}

std::string fixed4(double v) {
  if (!std::isfinite(v)) return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.4f", v);
  return buf;
}

}  // namespace

Comparison compare_runs(const std::vector<RunHistory>& runs, const CompareOptions& options) {
  Comparison c;
  c.axis = options.axis;
  for (const auto& h : runs) {
    RunRow row;
    row.name = h.dir;
    const auto& last = h.steps.back();
    row.steps = int64_t(h.steps.size());
    row.tokens = tokens_of(last.at, options.axis);
    row.final_loss = last.record.loss;
    if (!h.evals.empty()) row.final_eval = h.evals.back().loss;
    row.train_s = last.at.train_s;
    row.wall_s = std::max(last.at.wall_s, h.evals.empty() ? 0.0 : h.evals.back().at.wall_s);
    row.tokens_per_s = row.train_s > 0 ? double(last.at.real_tokens) / row.train_s : 0;
    row.spikes = h.spikes;
    row.skipped = h.skipped;
    row.clipped = h.clipped;
    c.runs.push_back(row);
  }

  // The equal-tokens grid: every pass's token count inside the span all runs with
  // passes share.
  int64_t lo = INT64_MIN, hi = INT64_MAX;
  std::set<int64_t> all;
  bool any = false;
  for (const auto& h : runs) {
    if (h.evals.empty()) continue;
    any = true;
    lo = std::max(lo, tokens_of(h.evals.front().at, options.axis));
    hi = std::min(hi, tokens_of(h.evals.back().at, options.axis));
    for (const auto& e : h.evals) all.insert(tokens_of(e.at, options.axis));
  }
  if (any && lo <= hi) {
    std::vector<int64_t> grid;
    for (int64_t t : all)
      if (t >= lo && t <= hi) grid.push_back(t);
    c.grid = thin(grid, options.max_rows);
  }
  for (int64_t t : c.grid) {
    std::vector<std::optional<EvalAt>> row;
    for (const auto& h : runs) row.push_back(eval_at(h, t, options.axis));
    c.eval_at.push_back(std::move(row));
  }

  for (size_t i = 0; i < runs.size(); ++i) {
    if (runs[i].evals.empty()) continue;
    Comparison::Target target;
    target.run = i;
    target.loss = runs[i].evals.back().loss;
    for (const auto& h : runs) {
      std::optional<Reach> reach;
      for (const auto& e : h.evals)
        if (e.loss <= target.loss) {
          reach = Reach{tokens_of(e.at, options.axis), e.at.wall_s, e.at.step};
          break;
        }
      target.reach.push_back(reach);
    }
    c.targets.push_back(std::move(target));
  }
  return c;
}

std::string format_comparison(const Comparison& c) {
  const char* axis = c.axis == TokenAxis::Input ? "input tokens (samples x seq_length)" : "loss-bearing tokens";
  std::string out = std::to_string(c.runs.size()) + " runs, aligned by " + axis + "\n\n";

  size_t name_w = 3;
  for (const auto& r : c.runs) name_w = std::max(name_w, r.name.size());
  out += pad("run", name_w, true) + "   steps        tokens  train loss    val loss       tok/s  train time        wall"
         "  spikes  skipped  clipped\n";
  for (const auto& r : c.runs) {
    out += pad(r.name, name_w, true) + pad(format_thousands(r.steps), 8) + pad(format_thousands(r.tokens), 14) +
           pad(fixed4(r.final_loss), 12) + pad(r.final_eval ? fixed4(*r.final_eval) : "-", 12) +
           pad(format_si(r.tokens_per_s), 12) + pad(format_duration(r.train_s), 12) +
           pad(format_duration(r.wall_s), 12) + pad(format_thousands(r.spikes), 8) +
           pad(format_thousands(r.skipped), 9) + pad(format_thousands(r.clipped), 9) + "\n";
  }

  const size_t col = std::max<size_t>(name_w, 18) + 2;
  out += "\nvalidation loss at equal tokens (~: interpolated between the run's passes)\n";
  if (c.grid.empty()) {
    out += "  (no token count that every run with validation passes spans)\n";
  } else {
    out += pad("tokens", 14);
    for (const auto& r : c.runs) out += pad(r.name, col);
    out += "\n";
    for (size_t g = 0; g < c.grid.size(); ++g) {
      out += pad(format_thousands(c.grid[g]), 14);
      for (const auto& v : c.eval_at[g]) out += pad(v ? (v->interpolated ? "~" : "") + fixed4(v->loss) : "-", col);
      out += "\n";
    }
  }

  out += "\ntokens (wall time) to reach each run's final validation loss (-: not reached)\n";
  if (c.targets.empty()) {
    out += "  (no run has a validation pass)\n";
    return out;
  }
  const size_t target_w = name_w + 10;
  out += pad("target", target_w, true);
  for (const auto& r : c.runs) out += pad(r.name, col);
  out += "\n";
  for (const auto& t : c.targets) {
    out += pad(c.runs[t.run].name + " " + fixed4(t.loss), target_w, true);
    for (const auto& reach : t.reach)
      out += pad(reach ? format_thousands(reach->tokens) + " (" + format_duration(reach->wall_s) + ")" : "-", col);
    out += "\n";
  }
  return out;
}

}  // namespace troupe::metrics
