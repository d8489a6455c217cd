// Rung 1, parallel parity (docs/acceptance.md, part "Second"): the same data, initial weights
// and global batch through the actor runtime in each parallel layout, against the
// single-device reference trainer fed the same microbatches, after
// tol::kParityUpdates updates: every step's loss, loss-bearing tokens, gradient norm,
// LR and sample IDs, then every parameter and both Adam moments by tensor name.
// Separate layouts (DP alone, PP alone, TP alone, then combined) so that a
// discrepancy has somewhere to be traced.
#include <algorithm>
#include <chrono>
#include <cmath>

#include <fmt/format.h>

#include "acceptance/measure.h"
#include "acceptance/rungs.h"
#include "acceptance/small_config.h"
#include "acceptance/tolerances.h"
#include "actors/runtime.h"
#include "config/derived.h"
#include "data/batch_source.h"
#include "kernels/cpu/cpu_device.h"
#include "model/param_registry.h"
#include "engine/reference_trainer.h"

namespace troupe::acceptance {
namespace {

// One layout's run against the reference; fills the section's checks.
void compare_layout(const Config& layout, Section& s) {
  const int n = tol::kParityUpdates;
  const int64_t G = layout.batch().global_batch_size();
  actors::RunOptions o;
  o.console = false;
  o.collect_state = true;
  o.timeout = std::chrono::seconds(600);
  const auto r = actors::run_training(layout, o);
  s.checks.push_back(check_true("the run completed", r.outcome.status == "completed" && r.state.has_value()));
  if (r.outcome.status != "completed" || !r.state) {
    s.notes.push_back("run status " + r.outcome.status + ": " + r.outcome.error);
    return;
  }

  kernels::cpu::CpuDevice device(1);
  engine::ReferenceTrainer ref(layout, device);
  const auto src = data::BatchSource::open(layout);
  const int m = int(config::microbatches_per_replica(layout));
  double loss_rel = 0, norm_rel = 0;
  int64_t token_mismatch = 0, lr_mismatch = 0, id_mismatch = 0, clip_mismatch = 0;
  std::string losses;
  const size_t steps = r.outcome.steps.size();
  s.checks.push_back(check_eq("updates recorded", double(steps), n));
  for (int k = 0; k < n && size_t(k) < steps; ++k) {
    std::vector<data::Microbatch> mbs;
    for (int d = 0; d < layout.parallel().data(); ++d)
      for (int j = 0; j < m; ++j) mbs.push_back(src.microbatch(int64_t(k) * G, d, j));
    const auto want = ref.step(mbs);
    const auto& got = r.outcome.steps[size_t(k)];
    loss_rel = std::max(loss_rel, std::fabs(got.loss - want.loss) / std::fabs(want.loss));
    norm_rel = std::max(norm_rel, std::fabs(got.grad_norm - want.grad_norm) / want.grad_norm);
    token_mismatch += got.loss_tokens != want.loss_tokens;
    lr_mismatch += got.lr != want.lr;
    clip_mismatch += got.clipped != want.clipped || got.skipped != want.skipped;
    auto ids = src.global_batch_ids(int64_t(k) * G);
    auto seen = size_t(k) < r.outcome.step_samples.size() ? r.outcome.step_samples[size_t(k)] : std::vector<int64_t>{};
    std::sort(ids.begin(), ids.end());
    std::sort(seen.begin(), seen.end());
    id_mismatch += ids != seen;
    losses += fmt::format("{}{:.6f} (ref {:.6f})", losses.empty() ? "" : ", ", got.loss, want.loss);
  }
  s.notes.push_back("losses per update: " + losses);
  s.checks.push_back(check_le("loss: max over updates of |runtime - reference| / reference", loss_rel, tol::kLossRel));
  s.checks.push_back(check_le("gradient norm: max relative difference", norm_rel, tol::kGradNormRel));
  s.checks.push_back(check_eq("updates whose loss-bearing token count differs", double(token_mismatch), 0));
  s.checks.push_back(check_eq("updates whose LR differs", double(lr_mismatch), 0));
  s.checks.push_back(check_eq("updates whose clip / skip decision differs", double(clip_mismatch), 0));
  s.checks.push_back(check_eq("updates whose sample IDs differ from the reference batch", double(id_mismatch), 0));

  auto& model = ref.model();
  auto& adam = ref.optimizer();
  const auto& state = *r.state;
  double param = 0, moment = 0;
  std::string param_name, moment_name;
  int64_t missing = 0;
  for (const auto& t : model.registry().tensors()) {
    const auto pit = state.params.find(t.name);
    const auto mit = state.exp_avg.find(t.name);
    const auto vit = state.exp_avg_sq.find(t.name);
    if (pit == state.params.end() || mit == state.exp_avg.end() || vit == state.exp_avg_sq.end() ||
        int64_t(pit->second.size()) != t.numel) {
      ++missing;
      continue;
    }
    double dp = 0;
    for (int64_t i = 0; i < t.numel; ++i)
      dp = std::max(dp, double(std::fabs(pit->second[size_t(i)] - model.params()[t.offset + i])));
    if (dp >= param) param = dp, param_name = t.name;
    for (const auto* moments : {&mit->second, &vit->second}) {
      const float* want = moments == &mit->second ? adam.m() + t.offset : adam.v() + t.offset;
      double diff = 0, scale = 0;
      for (int64_t i = 0; i < t.numel; ++i) {
        diff = std::max(diff, double(std::fabs((*moments)[size_t(i)] - want[i])));
        scale = std::max(scale, double(std::fabs(want[i])));
      }
      const double rel = scale > 0 ? diff / scale : diff;
      if (rel >= moment) moment = rel, moment_name = t.name + (moments == &mit->second ? " (m)" : " (v)");
    }
  }
  s.checks.push_back(check_eq("reference tensors missing from the runtime's state", double(missing), 0));
  s.checks.push_back(check_le(fmt::format("parameters: worst tensor ({}) max |runtime - reference|", param_name), param,
                              tol::kParamAbs));
  s.checks.push_back(check_le(fmt::format("Adam moments: worst tensor ({}) max |runtime - reference| / max |reference|",
                                          moment_name),
                              moment, tol::kMomentRel));
  s.checks.push_back(check_eq("Adam step counter", double(state.adam_steps), double(adam.steps())));
}

Section layout_section(const LadderContext& ctx, const std::string& name, const std::string& purpose, int dp, int pp,
                       int tp) {
  const auto t0 = std::chrono::steady_clock::now();
  Section s;
  s.name = name;
  s.purpose = purpose;
  Config c = for_run(ctx.small, ctx.runs_root, "parity-" + fmt::format("dp{}-pp{}-tp{}", dp, pp, tp),
                     tol::kParityUpdates);
  c.mutable_parallel()->set_data(dp);
  c.mutable_parallel()->set_pipeline(pp);
  c.mutable_parallel()->set_tensor(tp);
  if (tp == 1) c.mutable_parallel()->set_sequence_parallel(false);
  // One stage has no pipeline to schedule: the interleaved and zero-bubble schedules
  // need two stages or more, so a PP 1 layout runs the plain 1F1B (the same bits).
  const auto schedule = c.parallel().schedule();
  if (pp < 2 && (schedule == ParallelConfig::INTERLEAVED_1F1B || schedule == ParallelConfig::ZB_H1)) {
    c.mutable_parallel()->set_schedule(ParallelConfig::ONE_F_ONE_B);
    c.mutable_parallel()->set_virtual_stages(1);
  }
  s.notes.push_back(fmt::format("layout DP {} x PP {} x TP {}, {} schedule, {} microbatches per replica, global batch "
                                "{}",
                                dp, pp, tp, ParallelConfig::Schedule_Name(c.parallel().schedule()),
                                config::microbatches_per_replica(c), c.batch().global_batch_size()));
  compare_layout(c, s);
  s.seconds = seconds_since(t0);
  s.decide();
  return s;
}

Section not_run(const std::string& name, const std::string& purpose, Status status, const std::string& why) {
  Section s;
  s.name = name;
  s.purpose = purpose;
  s.status = status;
  s.notes.push_back(why);
  return s;
}

}  // namespace

std::vector<Section> parallel_parity(const LadderContext& ctx) {
  const auto& p = ctx.small.parallel();
  const int dp = p.data(), pp = p.pipeline(), tp = p.tensor();
  std::vector<Section> out;

  const std::string dp_purpose = "Data parallelism alone: gradients of corresponding parameters summed over replicas.";
  if (dp > 1) out.push_back(layout_section(ctx, fmt::format("DP parity (DP {})", dp), dp_purpose, dp, 1, 1));
  else out.push_back(not_run("DP parity", dp_purpose, Status::kNotApplicable, "the layout has DP 1"));

  const std::string pp_purpose =
      "Pipeline parallelism alone: forward and backward handoffs between stages, microbatch accumulation, the tied "
      "embedding's two halves.";
  if (pp > 1) out.push_back(layout_section(ctx, fmt::format("PP parity (PP {})", pp), pp_purpose, 1, pp, 1));
  else out.push_back(not_run("PP parity", pp_purpose, Status::kNotApplicable, "the layout has PP 1"));

  const std::string tp_purpose = "Tensor parallelism alone: sharded computation and its assembly.";
  if (tp == 1) out.push_back(not_run("TP parity", tp_purpose, Status::kNotApplicable, "the layout has TP 1"));
  else out.push_back(layout_section(ctx, fmt::format("TP parity (TP {})", tp), tp_purpose, 1, 1, tp));

  const std::string all_purpose = "The combined layout, every dimension at once.";
  const int dims = (dp > 1) + (pp > 1) + (tp > 1);
  if (dims >= 2) {
    out.push_back(layout_section(ctx, fmt::format("combined (DP {} x PP {} x TP {})", dp, pp, tp), all_purpose, dp, pp, tp));
  } else {
    out.push_back(not_run("combined", all_purpose, Status::kNotApplicable,
                          "fewer than two parallel dimensions run here: the single-dimension section above is the "
                          "combined layout"));
  }
  return out;
}

}  // namespace troupe::acceptance
