// Rung 2, capacity (docs/acceptance.md, part "Third"): what each stage rank holds through a
// whole step, measured by its devices' allocation counters, against the ledger.
//
// The planner's ledger (sched/planner.h main_state_bytes_per_gpu) is the GPU's: bf16
// weights + fp32 gradients (6 bytes per parameter) on every rank, fp32 master weights
// and Adam moments (12 bytes) sharded over DP. The CPU run keeps everything in fp32
// and its weights ARE the master weights, so the equivalent CPU ledger is
//   params / (PP x TP) x (8 + 8 / DP) bytes per rank   (8: fp32 weights and gradients;
//                                                        8 / DP: m and v, sharded)
// (16 bytes per parameter without the distributed optimizer). Like the planner's it
// excludes activations, communication buffers, uneven shards (the first stage's
// embeddings, the last stage's tied copy of wte) and kernel scratch; the measurement
// includes all of them except communication buffers and the allocator's own slack.
#include <chrono>
#include <numeric>

#include <fmt/format.h>

#include "acceptance/measure.h"
#include "acceptance/rungs.h"
#include "acceptance/small_config.h"
#include "actors/runtime.h"
#include "config/derived.h"
#include "engine/topology.h"
#include "metrics/human_units.h"
#include "sched/planner.h"

namespace troupe::acceptance {
namespace {

using metrics::format_bytes;

// The CPU ledger's main state of one rank, equal split.
double cpu_ledger_per_rank(const Config& c) {
  const double per = sched::params_per_gpu(c);
  const int dp = c.parallel().data();
  return c.parallel().distributed_optimizer() ? per * (8.0 + 8.0 / dp) : per * 16.0;
}

// Measures `c` rank by rank and adds the checks and notes to `s`.
void measure_layout(const Config& c, Section& s) {
  const auto ranks = measure_step_memory(c);
  const int dp = c.parallel().data();
  const double ledger = cpu_ledger_per_rank(c);
  int64_t stage_off = 0, optim_off = 0, total_main = 0, total_measured = 0, split_off = 0, planner_off = 0;
  for (const auto& r : ranks) {
    // The stage device's peak by category against the stage's own objects and the
    // planner's activation figure (sched/activation_memory.h: the same formula).
    const auto& m = r.stage_split;
    const bool split_bad = m.weights != 4 * r.params || m.gradients != 4 * r.params || m.optimizer_state != 0;
    split_off += split_bad;
    planner_off += m.activations != r.planned_activations;
    s.notes.push_back(fmt::format(
        "{}: stage device peak {} = weights {} + gradients {} + optimizer state {} + saved activations {} + scratch "
        "{}; the planner's saved activations {} ({:+} bytes)",
        engine::stage_path(r.rank), format_bytes(double(m.total())), format_bytes(double(m.weights)),
        format_bytes(double(m.gradients)), format_bytes(double(m.optimizer_state)),
        format_bytes(double(m.activations)), format_bytes(double(m.scratch)),
        format_bytes(double(r.planned_activations)), m.activations - r.planned_activations));
    const int64_t stage_counted = 8 * r.params + r.activations();
    const int64_t slack = r.stage_peak - stage_counted;
    const bool stage_bad = slack < 0 || slack > 64 * r.stage_allocations;
    stage_off += stage_bad;
    if (stage_bad)
      s.notes.push_back(fmt::format("{}: stage device peak {} bytes, counted {} bytes ({:+} bytes; {} blocks allow up "
                                    "to {} of rounding)",
                                    engine::stage_path(r.rank), r.stage_peak, stage_counted, slack,
                                    r.stage_allocations, 64 * r.stage_allocations));
    const int64_t optim_slack = r.optim_peak - 8 * r.shard;
    optim_off += optim_slack < 0 || optim_slack > 2 * 64;
    total_main += r.main_state();
    total_measured += r.measured();
    s.notes.push_back(fmt::format(
        "{}: {} parameters, moments of {}: main state {} (CPU ledger, equal split: {}, x{:.2f}); activations {} slot{} "
        "({} in all, the largest {}) + backward scratch {}; kernel scratch {}; measured peak: stage device {}, optimizer device {}",
        engine::stage_path(r.rank), metrics::format_thousands(r.params), metrics::format_thousands(r.shard),
        format_bytes(double(r.main_state())), format_bytes(ledger), double(r.main_state()) / ledger, r.slots,
        r.slots == 1 ? "" : "s", format_bytes(double(r.all_slot_bytes)), format_bytes(double(r.slot_bytes)),
        format_bytes(double(r.stage_scratch_bytes)),
        format_bytes(double(r.kernel_scratch + r.optim_kernel_scratch)), format_bytes(double(r.stage_peak)),
        format_bytes(double(r.optim_peak))));
  }
  s.checks.push_back(check_eq("ranks whose stage-device peak is not params + grads + activation slots + scratch "
                              "(within 64-byte rounding per block)",
                              double(stage_off), 0));
  s.checks.push_back(check_eq("ranks whose optimizer-device peak is not its two fp32 moments (within rounding)",
                              double(optim_off), 0));
  s.checks.push_back(check_eq("ranks whose stage-device weights or gradients are not 4 bytes x its parameters",
                              double(split_off), 0));
  s.checks.push_back(check_eq("ranks whose measured saved activations differ from the planner's figure",
                              double(planner_off), 0));
  // Sum over ranks: the ledger's total plus the copies of parameters held twice (the
  // tied wte of the last stage, tensor-parallel replicas), once per data-parallel
  // replica of their stage.
  const int64_t N = config::parameter_count(c);
  const bool dist = c.parallel().distributed_optimizer();
  int64_t dup = 0;
  for (const auto& r : ranks)
    if (r.rank.dp == 0) dup += r.duplicates;
  const int64_t per_param = dist ? 8 * dp + 8 : 16 * dp;  // bytes of one parameter over its DP replicas
  const int64_t ledger_total = N * per_param;
  const int64_t dup_total = dup * per_param;
  s.checks.push_back(check_eq("main state over all ranks - ledger total - copies held twice (bytes)",
                              double(total_main - ledger_total - dup_total), 0));
  s.notes.push_back(fmt::format("all {} ranks: main state {} = ledger {} + copies held twice (tied wte, TP replicas) "
                                "{}; measured peaks summed {}",
                                ranks.size(), format_bytes(double(total_main)), format_bytes(double(ledger_total)),
                                format_bytes(double(dup_total)), format_bytes(double(total_measured))));
  const int64_t phys = physical_memory_bytes();
  s.checks.push_back(check_le("measured peaks of every rank summed / this machine's memory",
                              double(total_measured) / double(phys), 1.0));
}

// Peak RSS of a short actor run of `c` (the runtime itself, not its parts).
void actor_run_rss(const Config& c, const std::string& runs_root, const std::string& name, Section& s) {
  const Config run = for_run(c, runs_root, name, 2);
  const int64_t before = current_rss_bytes();
  const bool reset = reset_peak_rss();
  actors::RunOptions o;
  o.console = false;
  o.timeout = std::chrono::seconds(600);
  const auto r = actors::run_training(run, o);
  const int64_t peak = peak_rss_bytes();
  if (!reset || peak <= 0) {
    s.notes.push_back("process peak RSS: not measurable here (/proc/self/clear_refs or VmHWM unavailable)");
    return;
  }
  s.notes.push_back(fmt::format("process peak RSS during a 2-update actor run ({}): {} (RSS before the run {}); it "
                                "also holds the binary, CAF, OpenBLAS, the data index and message copies",
                                r.outcome.status, format_bytes(double(peak)), format_bytes(double(before))));
}

void planner_notes(const Config& c, Section& s) {
  const double per = sched::params_per_gpu(c);
  const int dp = c.parallel().data();
  s.notes.push_back(fmt::format(
      "planner's GPU ledger for the config's model ({} parameters, {} per GPU): main state {} per GPU at DP {}, {} "
      "at DP 1 (bf16 weights + fp32 gradients, 6 bytes; fp32 master + Adam, 12 bytes over DP)",
      metrics::format_thousands(config::parameter_count(c)), metrics::format_thousands(int64_t(per)),
      format_bytes(sched::main_state_bytes_per_gpu(per, dp, c.parallel().distributed_optimizer())), dp,
      format_bytes(sched::main_state_bytes_per_gpu(per, 1, c.parallel().distributed_optimizer()))));
}

}  // namespace

std::vector<Section> capacity(const LadderContext& ctx) {
  std::vector<Section> out;
  const std::string purpose =
      "Memory of every stage rank through one whole step, measured by its devices' allocation counters, against the "
      "CPU equivalent of the planner's ledger; the sum over ranks must be the ledger plus the tied embedding copy.";
  {
    const auto t0 = std::chrono::steady_clock::now();
    Section s;
    s.name = "small model";
    s.purpose = purpose;
    const Config& c = ctx.small;
    measure_layout(for_run(c, ctx.runs_root, "capacity-small", 1), s);
    actor_run_rss(c, ctx.runs_root, "capacity-small-run", s);
    s.seconds = seconds_since(t0);
    s.decide();
    out.push_back(std::move(s));
  }
  {
    const auto t0 = std::chrono::steady_clock::now();
    Section s;
    s.name = "the config's own model";
    s.purpose = purpose;
    const Config& c = ctx.config;
    std::string why;
    planner_notes(ctx.config, s);
    if (!cpu_sized(c, &why)) {
      s.status = Status::kNotAvailable;
      s.notes.push_back("not measured: the model is too large for this CPU (" + why +
                        "); measure its peak per stage on the target devices");
      out.push_back(std::move(s));
      return out;
    }
    measure_layout(for_run(c, ctx.runs_root, "capacity-config", 1), s);
    actor_run_rss(c, ctx.runs_root, "capacity-config-run", s);
    s.seconds = seconds_since(t0);
    s.decide();
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace troupe::acceptance
