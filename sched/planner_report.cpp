#include "sched/planner_report.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "config/derived.h"
#include "config/model_family.h"
#include "sched/activation_memory.h"
#include "sched/pipeline_schedule.h"
#include "sched/schedule_verifier.h"

namespace troupe::sched {
namespace {


// A table of text cells. With a header (a numeric table) the first column is
// left-aligned and the others right-aligned; without one (label: value lines) every
// column is left-aligned.
class Table {
 public:
  explicit Table(std::vector<std::string> header = {}) : numeric_(!header.empty()) {
    if (numeric_) rows_.push_back(std::move(header));
  }
  void row(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }
  std::string str(const std::string& indent = "  ") const {
    std::vector<size_t> width;
    for (const auto& r : rows_)
      for (size_t i = 0; i < r.size(); ++i) {
        if (width.size() <= i) width.push_back(0);
        width[i] = std::max(width[i], r[i].size());
      }
    std::string out;
    for (const auto& r : rows_) {
      std::string line = indent;
      for (size_t i = 0; i < r.size(); ++i) {
        if (i == 0)
          line += fmt::format("{:<{}}", r[i], width[i]);
        else if (!numeric_)
          line += fmt::format("  {:<{}}", r[i], width[i]);
        else
          line += fmt::format("  {:>{}}", r[i], width[i]);
      }
      while (!line.empty() && line.back() == ' ') line.pop_back();
      out += line + "\n";
    }
    return out;
  }

 private:
  bool numeric_;
  std::vector<std::vector<std::string>> rows_;
};

std::string percent(double f, int decimals = 1) { return fmt::format("{:.{}f}%", 100.0 * f, decimals); }
// Decimal units, as the articles use them (1 GB = 1e9 bytes).
std::string bytes_text(double bytes) {
  if (bytes >= 1e9) return fmt::format("{:.2f} GB", bytes / 1e9);
  if (bytes >= 1e6) return fmt::format("{:.2f} MB", bytes / 1e6);
  return fmt::format("{:.2f} kB", bytes / 1e3);
}
std::string count_text(int64_t n) {
  if (n >= 1000000000) return fmt::format("{:.2f}B", double(n) / 1e9);
  if (n >= 1000000) return fmt::format("{:.2f}M", double(n) / 1e6);
  return fmt::format("{:.2f}k", double(n) / 1e3);
}
std::string lr(double v) { return fmt::format("{:.6g}", v); }
// A measured rate as a whole number, or in e-notation where no int64 holds it.
std::string rate_text(double v) {
  return v < 9.0e18 ? group_digits(std::llround(v)) : fmt::format("{:.4e}", v);
}

const char* style_name(LrScheduleConfig::DecayStyle s) {
  switch (s) {
    case LrScheduleConfig::COSINE: return "cosine";
    case LrScheduleConfig::LINEAR: return "linear";
    case LrScheduleConfig::CONSTANT: return "constant";
  }
  return "?";
}

// The interleaved 1F1B schedule for v = 2..4 chunks a stage (sched/pipeline_schedule.h):
// the closed-form and simulated idle, the verifier's verdict and stage 0's in-flight
// (microbatch, chunk) pairs, each holding 1/v of a stage's activations, against the
// min(p, m) whole microbatches 1F1B keeps there. Planned and
// verified here; the stage actors run one chunk a stage (parallel.schedule has no
// interleaved kind yet).
std::string interleaved_section(const Config& c, int64_t pp, int64_t mb) {
  std::string o = fmt::format("\nInterleaved 1F1B, v model chunks a stage: ideal idle (p-1)/(vm+p-1), p = {}, m = {} "
                              "(planned and verified; the stage actors do not run it yet)\n",
                              pp, group_digits(mb));
  const int64_t per_stage = c.model().layers() / pp;
  std::vector<std::string> why_not;
  Table t({"chunks v", "idle", "simulated", "schedule", "stage 0 in flight", "activations vs 1F1B"});
  bool any = false;
  for (int32_t v = 2; v <= 4; ++v) {
    if (per_stage % v != 0) {
      why_not.push_back(fmt::format("v = {}: {} layers a stage", v, per_stage));
      continue;
    }
    if (mb % pp != 0 || mb > 4096) {
      why_not.push_back(fmt::format("v = {}: m = {} {}", v, mb, mb % pp != 0 ? "not a multiple of p" : "too many to simulate"));
      continue;
    }
    const auto s = build_interleaved_schedule(int32_t(pp), int32_t(mb), v);
    const auto r = verify_schedule(s, ParallelConfig::ONE_F_ONE_B);
    any = true;
    t.row({std::to_string(v), percent(ideal_idle_fraction(pp, mb, v)), percent(simulate_schedule(s).idle_fraction),
           r.ok ? "verified" : "REFUSED: " + r.error,
           r.ok ? fmt::format("{} x 1/{} of a stage", r.peak_in_flight[0], v) : "-",
           // Stage 0 holds the most: its chunk activations against 1F1B's min(p, m) whole ones.
           r.ok ? fmt::format("{:.2f}x", double(r.peak_in_flight[0]) / v / double(std::min(pp, mb))) : "-"});
  }
  if (any) o += t.str();
  for (const auto& w : why_not) o += "  not for " + w + "\n";
  return o;
}

// ZB-H1 beside 1F1B (sched/pipeline_schedule.h), equal F, B and W times (1F1B's
// backward is B + W): the closed forms and the simulated op lists, and the verdict.
std::string zero_bubble_section(int64_t pp, int64_t mb) {
  std::string o = fmt::format("\nZero-bubble ZB-H1 beside 1F1B, equal F, B and W times (1F1B's backward = B + W), "
                              "p = {}, m = {}\n",
                              pp, group_digits(mb));
  if (mb > 4096) return o + "  not simulated: m = " + group_digits(mb) + " too many\n";
  Table t({"schedule", "idle", "simulated", "schedule check", "in flight per stage"});
  const auto f1b1 = build_pipeline_schedule(ParallelConfig::ONE_F_ONE_B, int32_t(pp), int32_t(mb));
  const auto zb = build_pipeline_schedule(ParallelConfig::ZB_H1, int32_t(pp), int32_t(mb));
  const auto rf = verify_schedule(f1b1, ParallelConfig::ONE_F_ONE_B);
  const auto rz = verify_schedule(zb, ParallelConfig::ZB_H1);
  t.row({"1F1B", percent(ideal_idle_fraction(pp, mb)), percent(simulate_schedule(f1b1, 1.0, 2.0).idle_fraction),
         rf.ok ? "verified" : "REFUSED: " + rf.error, rf.ok ? fmt::format("{}", fmt::join(rf.peak_in_flight, " ")) : "-"});
  t.row({"ZB_H1", percent(zero_bubble_idle_fraction(pp, mb)),
         percent(simulate_schedule(zb, 1.0, 1.0, 1.0).idle_fraction), rz.ok ? "verified" : "REFUSED: " + rz.error,
         rz.ok ? fmt::format("{} (to W; to B as 1F1B)", fmt::join(rz.peak_in_flight, " ")) : "-"});
  return o + t.str();
}

}  // namespace

std::string group_digits(int64_t v) {
  const std::string digits = std::to_string(v < 0 ? 0 - uint64_t(v) : uint64_t(v));
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return (v < 0 ? "-" : "") + out;
}

namespace {

// The calendar with failures: the kept fraction of wall time at the best checkpoint
// interval (RESTART) or with the config's (ELASTIC), and the days it gives.
std::string failure_calendar_text(const Config& c, const PlanInputs& in, double compute_days) {
  const auto& p = c.parallel();
  const int64_t gpus = int64_t(p.tensor()) * p.pipeline() * p.context() * p.data();
  const double step_tokens = double(c.batch().global_batch_size()) * double(c.batch().seq_length());
  FailureModel m;
  m.mtbf_s = in.mtbf_hours ? *in.mtbf_hours * 3600 : mtbf_seconds(*in.failures_per_gpu_hour, gpus);
  m.save_stall_s = in.save_stall_s;
  m.recovery_s = in.recovery_s;
  m.step_s = step_tokens / *in.tokens_per_s;
  m.recovery = in.recovery;
  const bool restart = m.recovery == Recovery::Restart;
  std::string o = fmt::format("\nCalendar with failures ({})\n", restart ? "RESTART from the newest checkpoint"
                                                                         : "ELASTIC: survivors adopt the lost replicas");
  Table t;
  t.row({"mean time between failures",
         in.mtbf_hours ? fmt::format("{:.2f} h (the cluster's, --mtbf-hours)", m.mtbf_s / 3600)
                       : fmt::format("{:.2f} h = 1 / ({:.3g} failures per GPU-hour x {} GPUs)", m.mtbf_s / 3600,
                                     *in.failures_per_gpu_hour, group_digits(gpus))});
  t.row({"step", fmt::format("{:.3f} s ({} tokens at {} tokens/s)", m.step_s, group_digits(int64_t(step_tokens)),
                             rate_text(*in.tokens_per_s))});
  t.row({"save stall C, recovery R", fmt::format("{:g} s, {:g} s", m.save_stall_s, m.recovery_s)});
  auto describe = [&](const FailureCost& f) {
    return fmt::format("{} steps ({:.0f} s): saving {}, failures {} ({:.0f} s lost each), kept {}",
                       group_digits(f.interval_steps), f.interval_s, percent(f.save_fraction, 2),
                       percent(f.failure_fraction, 2), f.lost_per_failure_s, percent(f.efficiency, 2));
  };
  FailureCost used;
  if (restart) {
    const double daly = daly_interval_s(m);
    t.row({"Daly's interval sqrt(2 C M) - C", fmt::format("{:.0f} s = {:.1f} steps", daly, daly / m.step_s)});
    used = best_interval(m);
    t.row({"best interval", describe(used)});
    if (c.checkpoint().interval_steps() > 0)
      t.row({fmt::format("checkpoint.interval_steps = {}", c.checkpoint().interval_steps()),
             describe(failure_cost(m, c.checkpoint().interval_steps()))});
  } else {
    const int64_t k = c.checkpoint().interval_steps();
    if (k <= 0) {
      FailureModel no_saves = m;
      no_saves.save_stall_s = 0;
      used = failure_cost(no_saves, 1);
      used.interval_steps = 0;
      t.row({"checkpoint.interval_steps = 0", fmt::format("no saves: failures {} ({:.0f} s lost each), kept {}",
                                                          percent(used.failure_fraction, 2),
                                                          used.lost_per_failure_s, percent(used.efficiency, 2))});
    } else {
      used = failure_cost(m, k);
      t.row({fmt::format("checkpoint.interval_steps = {}", k), describe(used)});
    }
  }
  if (used.efficiency <= 0) {
    t.row({"calendar days", "never: each failure costs more than the time between failures"});
  } else {
    t.row({fmt::format("calendar days at {} kept", percent(used.efficiency, 1)),
           fmt::format("{:.2f}", compute_days / used.efficiency)});
  }
  o += t.str();
  o += restart ? "  (kept = tau / (tau + C) x (1 - (R + (tau + C) / 2) / M); docs/planner.md)\n"
               : "  (kept = tau / (tau + C) x (1 - (R + step / 2) / M); elastic recovery is not built yet: a what-if)\n";
  return o;
}

}  // namespace

std::string render_plan(const Config& c, const PlanInputs& in) {
  const auto& m = c.model();
  const auto& p = c.parallel();
  const auto& b = c.batch();
  const int64_t tp = p.tensor(), pp = p.pipeline(), cp = p.context(), dp = p.data();
  const int64_t mb = config::microbatches_per_replica(c);
  const int64_t params = config::parameter_count(c);
  std::string o;

  o += "Model\n";
  {
    Table t;
    const config::ModelFamily& family = config::model_family(m);
    t.row({"architecture", fmt::format("{} ({})", family.name, family.summary)});
    t.row({"layers x width", fmt::format("{} x {}", m.layers(), group_digits(m.width()))});
    t.row({"heads (head size)", fmt::format("{} ({}{})", m.heads(), config::head_size(m), m.head_dim() > 0 ? ", model.head_dim" : "")});
    if (family.grouped_query) t.row({"kv heads", fmt::format("{}", config::kv_heads(m))});
    t.row({family.swiglu ? "ffn width (SwiGLU)" : "ffn width", group_digits(config::ffn_width(m))});
    t.row({"LM head", m.tied_embeddings() ? "tied to the token embedding" : "untied"});
    t.row({"vocab (padded)", fmt::format("{} ({})", group_digits(m.vocab_size()),
                                         group_digits(config::padded_vocab(c)))});
    t.row({"parameters", fmt::format("{} ({})", group_digits(params), count_text(params))});
    o += t.str();
  }

  o += "\nLayout\n";
  {
    Table t;
    t.row({"TP x PP x CP x DP", fmt::format("{} x {} x {} x {} = {} GPUs", tp, pp, cp, dp,
                                            group_digits(tp * pp * cp * dp))});
    t.row({"placement", config::placement_text(c)});
    t.row({"sequence parallel", p.sequence_parallel() ? "on" : "off"});
    t.row({"pipeline schedule", p.schedule() == ParallelConfig::GPIPE   ? "GPipe"
                                : p.schedule() == ParallelConfig::ZB_H1 ? "ZB-H1"
                                                                        : "1F1B"});
    t.row({"distributed optimizer", p.distributed_optimizer() ? "on" : "off"});
    o += t.str();
  }

  o += "\nBatch\n";
  {
    Table t;
    t.row({"micro batch", fmt::format("{} sequence{}", b.micro_batch_size(),
                                      b.micro_batch_size() == 1 ? "" : "s")});
    t.row({"microbatches per data-parallel group", group_digits(mb)});
    t.row({"sequences per update", fmt::format("{} = {} x {} x {}", group_digits(b.global_batch_size()),
                                               b.micro_batch_size(), group_digits(mb), dp)});
    t.row({"tokens per update", fmt::format("{} = {} x {}", group_digits(config::tokens_per_update(c)),
                                            group_digits(b.global_batch_size()),
                                            group_digits(b.seq_length()))});
    o += t.str();
  }

  o += fmt::format("\nIdeal pipeline idle (p-1)/(m+p-1), p = {}\n", pp);
  {
    Table t({"microbatches m", "idle"});
    if (mb % 2 == 0) t.row({fmt::format("{} (half)", group_digits(mb / 2)), percent(ideal_idle_fraction(pp, mb / 2))});
    t.row({fmt::format("{} (this config)", group_digits(mb)), percent(ideal_idle_fraction(pp, mb))});
    t.row({fmt::format("{} (double)", group_digits(2 * mb)), percent(ideal_idle_fraction(pp, 2 * mb))});
    o += t.str();
  }

  if (pp > 1) o += interleaved_section(c, pp, mb);
  if (pp > 1) o += zero_bubble_section(pp, mb);

  o += "\nCausal attention position pairs per sequence, L(L+1)/2\n";
  {
    Table t({"sequence length L", "pairs"});
    const int64_t L = b.seq_length();
    if (L % 2 == 0) t.row({fmt::format("{} (half)", group_digits(L / 2)), group_digits(causal_pairs(L / 2))});
    t.row({fmt::format("{} (this config)", group_digits(L)), group_digits(causal_pairs(L))});
    o += t.str();
    if (L % 2 == 0)
      o += fmt::format("  at equal total tokens: {:.2f}x the pairs per sequence, {:.2f}x per token\n",
                       double(causal_pairs(L)) / double(causal_pairs(L / 2)),
                       double(causal_pairs(L)) / double(causal_pairs(L / 2)) / 2.0);
  }

  const TokenPlan tokens = token_plan(c, in.token_budget);
  o += "\nTraining length\n";
  {
    Table t;
    t.row({"token budget", group_digits(tokens.budget)});
    t.row({"full updates in train_samples", group_digits(tokens.full_updates)});
    t.row({"samples they read", group_digits(tokens.samples)});
    t.row({"tokens they read", group_digits(tokens.tokens)});
    t.row({tokens.shortfall >= 0 ? "shortfall to the budget" : "excess over the budget",
           fmt::format("{} ({:.6f}%)", group_digits(std::abs(tokens.shortfall)),
                       100.0 * double(std::abs(tokens.shortfall)) / double(tokens.budget))});
    o += t.str();
    if (tokens.budget_derived)
      o += "  (training.token_budget is 0: the budget is train_samples x seq_length\n"
           "  rounded up to 2 significant figures)\n";
  }

  const WarmupPlan w = warmup_plan(c);
  o += "\nWarmup\n";
  {
    Table t;
    t.row({"samples", group_digits(w.samples)});
    t.row({"updates (rounded up)", group_digits(w.updates)});
    t.row({"tokens of those updates", group_digits(w.tokens)});
    o += t.str();
  }

  const LrPoints lp = lr_points(c);
  o += fmt::format("\nLearning rate: warmup {} -> {}, then {} to {}\n", lr(c.optimizer().warmup_init()),
                   lr(c.optimizer().lr()), style_name(c.lr_schedule().decay_style()),
                   lr(c.optimizer().min_lr()));
  {
    Table t({"point", "sample", "lr", "first update at it"});
    t.row({"warmup end", group_digits(lp.warmup_end_sample), lr(lp.warmup_end), group_digits(lp.warmup_end_update)});
    t.row({"decay midpoint", group_digits(lp.midpoint_sample), lr(lp.midpoint), group_digits(lp.midpoint_update)});
    t.row({"decay end", group_digits(lp.end_sample), lr(lp.end), group_digits(lp.end_update)});
    o += t.str();
    o += "  (update k applies the schedule at the (k - 1) x global batch samples consumed before it,\n"
         "  as Megatron's training loop does: update 1 applies the warmup's start)\n";
  }

  const AdamwStep step = adamw_step(0.5, 0.5, c.optimizer().lr(), c.optimizer().weight_decay());
  o += fmt::format("\nOne AdamW step at peak lr {} with weight decay {}: parameter 0.5, Adam update 0.5\n",
                   lr(c.optimizer().lr()), lr(c.optimizer().weight_decay()));
  {
    Table t;
    t.row({"after decay, p x (1 - lr x wd)", fmt::format("{:.6f}", step.after_decay)});
    t.row({"after update, minus lr x u", fmt::format("{:.6f}", step.after_update)});
    o += t.str();
  }

  // Layout rows: DP 1, this config's DP, and every cluster size of the scaling table.
  std::set<int64_t> dps = {1, dp};
  for (const auto& s : in.scaling)
    if (s.gpus % (tp * pp * cp) == 0) dps.insert(s.gpus / (tp * pp * cp));
  o += fmt::format("\nMain state per GPU, params/(TP x PP) x ({}) bytes; {} params per GPU\n",
                   p.distributed_optimizer() ? "6 + 12/DP" : "6 + 12, optimizer not distributed",
                   group_digits(int64_t(std::llround(params_per_gpu(c)))));
  {
    Table t({"DP", "GPUs", "microbatches per group", "ideal pipeline idle", "main state per GPU"});
    for (int64_t d : dps) {
      const Layout l = layout_for(c, d);
      t.row({fmt::format("{}{}", d, d == dp ? " (this config)" : ""), group_digits(l.gpus),
             l.microbatches ? group_digits(*l.microbatches) : "not divisible",
             l.microbatches ? percent(l.pipeline_idle) : "-", bytes_text(l.main_state_bytes)});
    }
    o += t.str();
    o += "  bf16 weights + fp32 gradients (6 bytes) on every GPU; fp32 master weights and Adam\n"
         "  moments (12 bytes) sharded over DP. Excludes activations, communication buffers,\n"
         "  uneven shards and the allocator's slack: measure the peak on the real model.\n";
  }

  const TpCommPlan tc = tp_comm_plan(c);
  if (tc.tensor == 1) {
    o += "\nTensor-parallel traffic: none (TP 1)\n";
  } else {
    o += fmt::format("\nTensor-parallel traffic per microbatch, TP {}, sequence parallel {}, bf16 activations\n",
                     tc.tensor, tc.sequence_parallel ? "on" : "off");
    Table t;
    t.row({"activation A = b x s x h x 2 bytes",
           fmt::format("{} bytes = {} x {} x {} x 2", group_digits(tc.activation_bytes), b.micro_batch_size(),
                       group_digits(b.seq_length()), group_digits(m.width()))});
    t.row({"collectives per layer (fwd + bwd)",
           tc.sequence_parallel ? fmt::format("{} all-gathers + {} reduce-scatters of A", tc.all_gathers,
                                              tc.reduce_scatters)
                                : fmt::format("{} all-reduces of A", tc.all_reduces)});
    const int64_t ring = tc.sequence_parallel ? tc.all_gathers + tc.reduce_scatters : 2 * tc.all_reduces;
    t.row({"sent per rank per layer", fmt::format("{} bytes = {} x {}/{} x A ({})", group_digits(tc.layer_bytes),
                                                  ring, tc.tensor - 1, tc.tensor, bytes_text(double(tc.layer_bytes)))});
    t.row({fmt::format("per stage ({} layers)", tc.layers_per_stage),
           fmt::format("{} bytes ({})", group_digits(tc.stage_bytes), bytes_text(double(tc.stage_bytes)))});
    t.row({"first stage adds (embedding)", fmt::format("{} bytes", group_digits(tc.embedding_bytes))});
    t.row({"last stage adds (ln_f, loss partials)", fmt::format("{} bytes", group_digits(tc.head_bytes))});
    t.row({fmt::format("per update ({} microbatches), per rank", tc.microbatches),
           fmt::format("{} bytes ({})", group_digits(tc.update_bytes), bytes_text(double(tc.update_bytes)))});
    o += t.str();
    o += "  ring algorithms: 2 (t-1)/t A per all-reduce, (t-1)/t A per all-gather or reduce-scatter;\n"
         "  the loss exchanges 3 fp32 values per token (max, sum of exps, target logit), never logits.\n";
  }

  if (in.tokens_per_s) {
    const Calendar cal = calendar(double(tokens.budget), *in.tokens_per_s, in.calendar_efficiency);
    o += fmt::format("\nCalendar for the token budget at {} tokens/s\n", rate_text(*in.tokens_per_s));
    Table t;
    t.row({"days of pure compute", fmt::format("{:.2f}", cal.compute_days)});
    t.row({fmt::format("calendar days at {} efficiency", percent(in.calendar_efficiency, 0)),
           fmt::format("{:.2f}", cal.calendar_days)});
    o += t.str();
    o += "  (efficiency applies once: if the throughput was measured over whole wall time,\n"
         "  including saves and restarts, use --calendar-efficiency 1)\n";
    if (in.failures_per_gpu_hour || in.mtbf_hours) o += failure_calendar_text(c, in, cal.compute_days);
  }

  if (!in.scaling.empty()) {
    o += "\nScaling, each step against the previous measured row\n";
    Table t({"GPUs", "DP", "tokens/s", "speed-up", "scaling efficiency"});
    const ScalingPoint* prev = nullptr;
    for (const auto& s : in.scaling) {
      std::vector<std::string> r = {group_digits(s.gpus),
                                    s.gpus % (tp * pp * cp) == 0 ? group_digits(s.gpus / (tp * pp * cp)) : "-",
                                    s.tokens_per_s ? rate_text(*s.tokens_per_s) : "not measured",
                                    "-", "-"};
      if (s.tokens_per_s) {
        if (prev) {
          const ScalingStep st = scaling_step(*prev, s);
          r[3] = fmt::format("{:.2f}x", st.speedup);
          r[4] = percent(st.efficiency, 0);
        }
        prev = &s;
      }
      t.row(r);
    }
    o += t.str();
  }
  return o;
}

std::string render_memory_fit(const Config& c, double gpu_bytes) {
  const auto fits = fit_recompute(c, gpu_bytes);
  const int32_t L = c.model().layers() / std::max(1, c.parallel().pipeline());
  const int dp = c.parallel().data();
  const bool dist = c.parallel().distributed_optimizer();
  std::string out = fmt::format(
      "Memory per stage on a {} GPU, by recomputation ({} schedule, {} microbatches; docs/planner.md "
      "\"Activation memory\")\n",
      bytes_text(gpu_bytes), ParallelConfig::Schedule_Name(c.parallel().schedule()),
      group_digits(config::microbatches_per_replica(c)));
  out += fmt::format("  main state {} per GPU: {} parameters x ({}) bytes, fp32 as troupe keeps them\n",
                     bytes_text(fits.empty() ? 0.0 : fits.front().main_state_bytes), group_digits(int64_t(params_per_gpu(c))),
                     dist ? fmt::format("8 + 8/{}", dp) : std::string("16"));
  Table t({"stage", "layers", "in flight", "slots", "none", "selective", "full (all layers)", "least that fits",
           "its total"});
  const auto schedule = build_pipeline_schedule(c);
  auto total = [&](const RecomputeChoice& r, int32_t stage) {
    const StageActivations a = stage_activations(r.applied_to(c, L), stage, schedule);
    return fits.front().main_state_bytes + double(a.saved_bytes()) + double(a.scratch_bytes);
  };
  int32_t fitting = 0;
  for (const auto& f : fits) {
    fitting += f.fits;
    t.row({std::to_string(f.stage), std::to_string(f.activations.layers), std::to_string(f.activations.in_flight),
           std::to_string(f.activations.slots), bytes_text(total({ModelConfig::NONE, 0}, f.stage)),
           bytes_text(total({ModelConfig::SELECTIVE, 0}, f.stage)), bytes_text(total({ModelConfig::FULL, L}, f.stage)),
           f.fits ? (f.choice.mode == ModelConfig::FULL && f.choice.layers >= L
                         ? std::string("full (uniform)")
                         : f.choice.mode == ModelConfig::FULL ? fmt::format("full {} of {} (block)", f.choice.layers, L)
                                                              : f.choice.str())
                  : std::string("none fits"),
           f.fits ? bytes_text(f.total_bytes) : "-"});
  }
  out += t.str();
  out += fmt::format(
      "  totals: main state + saved activations of the slots + the stage's shared scratch (fp32); they exclude\n"
      "  tensor-parallel buffers, rotary tables, kernel scratch, communication buffers and allocator slack.\n"
      "  {} of {} stages fit; order tried: none < selective < full of 1, 2, ... layers of the stage\n",
      fitting, fits.size());
  return out;
}

}  // namespace troupe::sched
