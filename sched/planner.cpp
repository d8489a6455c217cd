#include "sched/planner.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

#include "config/derived.h"
#include "sched/lr_schedule.h"
#include "sched/pipeline_schedule.h"

namespace troupe::sched {
namespace {

// v as an int64_t count, or std::overflow_error "<what> = <v>: more than a 64-bit count holds".
int64_t count(__int128 v, const std::string& what) {
  if (v > INT64_MAX || v < INT64_MIN)
    throw std::overflow_error(fmt::format("{} = {}: more than a 64-bit count holds ({})", what, v, INT64_MAX));
  return int64_t(v);
}

__int128 round_up_wide(__int128 x, int digits) {
  if (x <= 0) return x;
  __int128 scale = 1;
  for (__int128 v = x; v >= 10; v /= 10) scale *= 10;  // 10^(number of digits - 1)
  for (int d = 1; d < digits && scale > 1; ++d) scale /= 10;
  return (x + scale - 1) / scale * scale;
}

}  // namespace

int64_t causal_pairs(int64_t seq_length) { return seq_length * (seq_length + 1) / 2; }

int64_t round_up_significant(int64_t x, int digits) {
  return count(round_up_wide(x, digits), fmt::format("{} rounded up to {} significant figures", x, digits));
}

int64_t updates_covering(int64_t tokens, int64_t tokens_per_update) {
  return tokens / tokens_per_update + (tokens % tokens_per_update != 0);
}

TokenPlan token_plan(const Config& c, int64_t budget_override) {
  TokenPlan p;
  const int64_t seq = c.batch().seq_length();
  p.full_updates = config::full_updates(c);
  p.samples = p.full_updates * c.batch().global_batch_size();
  p.tokens = count(__int128(p.samples) * seq,
                   fmt::format("tokens of the full updates, {} samples x batch.seq_length {}", p.samples, seq));
  if (budget_override > 0) {
    p.budget = budget_override;
  } else if (c.training().token_budget() > 0) {
    p.budget = c.training().token_budget();
  } else {
    const int64_t samples = c.training().train_samples();
    p.budget = count(round_up_wide(__int128(samples) * seq, 2),
                     fmt::format("the token budget, training.train_samples {} x batch.seq_length {} rounded up "
                                 "to 2 significant figures",
                                 samples, seq));
    p.budget_derived = true;
  }
  p.shortfall = p.budget - p.tokens;
  return p;
}

WarmupPlan warmup_plan(const Config& c) {
  WarmupPlan w;
  w.samples = c.lr_schedule().warmup_samples();
  w.updates = updates_covering(w.samples, c.batch().global_batch_size());
  w.tokens = count(__int128(w.updates) * config::tokens_per_update(c),
                   fmt::format("warmup tokens, {} updates covering lr_schedule.warmup_samples {} x {} tokens "
                               "per update",
                               w.updates, w.samples, config::tokens_per_update(c)));
  return w;
}

LrPoints lr_points(const Config& c) {
  const LrSchedule s(c);
  LrPoints p;
  p.warmup_end_sample = s.warmup_samples();
  p.end_sample = s.decay_samples();
  p.midpoint_sample = p.warmup_end_sample + (p.end_sample - p.warmup_end_sample) / 2;
  p.warmup_end = s.lr_at(p.warmup_end_sample);
  p.midpoint = s.lr_at(p.midpoint_sample);
  p.end = s.lr_at(p.end_sample);
  const int64_t batch = c.batch().global_batch_size();
  p.warmup_end_update = updates_covering(p.warmup_end_sample, batch) + 1;
  p.midpoint_update = updates_covering(p.midpoint_sample, batch) + 1;
  p.end_update = updates_covering(p.end_sample, batch) + 1;
  return p;
}

AdamwStep adamw_step(double p, double u, double lr, double weight_decay) {
  AdamwStep s;
  s.after_decay = p * (1.0 - lr * weight_decay);
  s.after_update = s.after_decay - lr * u;
  return s;
}

double params_per_gpu(const Config& c) {
  return double(config::parameter_count(c)) /
         double(int64_t(c.parallel().tensor()) * c.parallel().pipeline());
}

double main_state_bytes_per_gpu(double params, int64_t data_parallel, bool distributed_optimizer) {
  const double sharded = distributed_optimizer ? 12.0 / double(data_parallel) : 12.0;
  return params * (6.0 + sharded);
}

TpCommPlan tp_comm_plan(const Config& c, int bytes_per_element) {
  TpCommPlan p;
  const int64_t t = c.parallel().tensor();
  p.tensor = t;
  p.sequence_parallel = c.parallel().sequence_parallel();
  p.bytes_per_element = bytes_per_element;
  const int64_t tokens = int64_t(c.batch().micro_batch_size()) * c.batch().seq_length();
  p.activation_bytes = count(__int128(tokens) * c.model().width() * bytes_per_element,
                             fmt::format("activation bytes A, batch.micro_batch_size {} x batch.seq_length {} x "
                                         "model.width {} x {}",
                                         c.batch().micro_batch_size(), c.batch().seq_length(),
                                         c.model().width(), bytes_per_element));
  p.layers_per_stage = c.model().layers() / c.parallel().pipeline();
  p.microbatches = config::microbatches_per_replica(c);
  if (t == 1) return p;
  if (p.sequence_parallel) {
    p.all_gathers = 4;
    p.reduce_scatters = 4;
  } else {
    p.all_reduces = 4;
  }
  // (t-1)/t of A per all-gather or reduce-scatter, twice that per all-reduce.
  const int64_t share = p.activation_bytes / t * (t - 1);
  const auto what = [&](const char* part) {
    return fmt::format("tensor-parallel bytes {}, from A = {} at parallel.tensor {}", part, p.activation_bytes, t);
  };
  p.layer_bytes = count(__int128(share) * (2 * p.all_reduces + p.all_gathers + p.reduce_scatters), what("per layer"));
  p.stage_bytes = count(__int128(p.layer_bytes) * p.layers_per_stage, what("per stage"));
  p.embedding_bytes = count(2 * __int128(share), what("of the embedding"));
  p.head_bytes = count(__int128(2) * share + __int128(t - 1) * 3 * 4 * tokens, what("of the last stage"));
  p.update_bytes = count(__int128(p.stage_bytes) * p.microbatches, what("per update"));
  return p;
}

Layout layout_for(const Config& c, int64_t data_parallel) {
  Layout l;
  l.data_parallel = data_parallel;
  const int64_t per_replica = int64_t(c.parallel().tensor()) * c.parallel().pipeline() * c.parallel().context();
  l.gpus = count(__int128(per_replica) * data_parallel,
                 fmt::format("GPUs, TP x PP x CP {} x DP {}", per_replica, data_parallel));
  const __int128 per_step = __int128(c.batch().micro_batch_size()) * data_parallel;
  if (c.batch().global_batch_size() % per_step == 0) {
    l.microbatches = int64_t(c.batch().global_batch_size() / per_step);
    l.pipeline_idle = ideal_idle_fraction(c.parallel().pipeline(), *l.microbatches);
  }
  l.main_state_bytes = main_state_bytes_per_gpu(params_per_gpu(c), data_parallel,
                                                c.parallel().distributed_optimizer());
  return l;
}

Calendar calendar(double tokens, double tokens_per_s, double efficiency) {
  Calendar cal;
  cal.compute_days = tokens / tokens_per_s / 86400.0;
  cal.calendar_days = cal.compute_days / efficiency;
  return cal;
}

ScalingStep scaling_step(const ScalingPoint& a, const ScalingPoint& b) {
  ScalingStep s;
  s.speedup = *b.tokens_per_s / *a.tokens_per_s;
  s.efficiency = s.speedup / (double(b.gpus) / double(a.gpus));
  return s;
}

std::vector<ScalingPoint> parse_scaling(const std::string& text, const std::string& source) {
  std::vector<ScalingPoint> out;
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (const auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    std::vector<std::string> w;
    for (std::string x; words >> x;) w.push_back(x);
    if (w.empty()) continue;
    auto fail = [&](const std::string& what) {
      return std::runtime_error(source + ":" + std::to_string(n) + ": " + what);
    };
    if (w.size() > 2) throw fail("expected \"GPUs [tokens_per_s]\", got " + std::to_string(w.size()) + " values");
    ScalingPoint p;
    {
      const auto [end, ec] = std::from_chars(w[0].data(), w[0].data() + w[0].size(), p.gpus);
      if (ec != std::errc() || end != w[0].data() + w[0].size() || p.gpus <= 0)
        throw fail("GPUs must be a positive integer, got \"" + w[0] + "\"");
    }
    if (w.size() == 2) {
      double t = 0;
      const auto [end, ec] = std::from_chars(w[1].data(), w[1].data() + w[1].size(), t);
      if (ec != std::errc() || end != w[1].data() + w[1].size() || !(t > 0) || !std::isfinite(t))
        throw fail("tokens_per_s must be a positive number, got \"" + w[1] + "\"");
      p.tokens_per_s = t;
    }
    if (!out.empty() && p.gpus <= out.back().gpus)
      throw fail("GPUs must ascend: " + std::to_string(p.gpus) + " after " +
                 std::to_string(out.back().gpus));
    out.push_back(p);
  }
  if (out.empty()) throw std::runtime_error(source + ": no \"GPUs [tokens_per_s]\" rows");
  return out;
}

std::vector<ScalingPoint> read_scaling_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot open");
  std::ostringstream s;
  s << in.rdbuf();
  return parse_scaling(s.str(), path);
}

}  // namespace troupe::sched
