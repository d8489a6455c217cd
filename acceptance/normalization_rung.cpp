// Rung 1, loss normalization (docs/acceptance.md, part "First": a plain average of
// the microbatch losses is the subtle mistake to catch). The small model's first global batch (up to 64
// windows), ordered by loss-bearing tokens so its microbatches differ as much as the
// data allows, is computed two ways from the same initial weights:
//   one microbatch holding every window, and
//   its microbatches of micro_batch_size windows, gradients accumulated,
// and both must give loss = sum of per-token losses / loss-bearing tokens of the batch
// and the same gradients. The test-only switch (AcceptanceOptions /
// --break-loss-normalization) makes the accumulated path average microbatch means
// instead: each microbatch normalised by its own count and divided by the number of
// microbatches. That objective weights tokens unequally, and this section must FAIL.
#include <algorithm>
#include <chrono>
#include <cmath>

#include <fmt/format.h>

#include "acceptance/measure.h"
#include "acceptance/rungs.h"
#include "acceptance/small_config.h"
#include "acceptance/tolerances.h"
#include "data/batch_source.h"
#include "kernels/cpu/cpu_device.h"
#include "model/gpt_stage.h"

namespace troupe::acceptance {
namespace {

constexpr int kMaxRows = 64;

struct Pass {
  double loss = 0;
  std::vector<float> grads;
};

}  // namespace

Section loss_normalization(const LadderContext& ctx) {
  const auto t0 = std::chrono::steady_clock::now();
  Section s;
  s.name = "loss normalization";
  s.purpose =
      "The global batch as one microbatch and as accumulated microbatches of unequal loss-bearing token counts give "
      "the same loss and gradients (token-weighted, never a mean of microbatch means).";
  if (ctx.break_loss_normalization)
    s.notes.push_back("TEST SWITCH ON: the accumulated path averages microbatch means (this section must fail)");
  const Config c = for_run(ctx.small, ctx.runs_root, "normalization", 1);
  const auto src = data::BatchSource::open(c);
  const int mbs = c.batch().micro_batch_size();
  auto ids = src.global_batch_ids(0);
  ids.resize(std::min<size_t>(ids.size(), size_t(kMaxRows / mbs * mbs)));
  // Order by loss-bearing tokens, most first.
  std::vector<std::pair<int64_t, int64_t>> counted;
  for (int64_t id : ids) {
    const int64_t one[] = {id};
    counted.emplace_back(-src.samples(one).loss_tokens, id);
  }
  std::stable_sort(counted.begin(), counted.end());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = counted[i].second;

  const int rows = int(ids.size());
  const int T = c.batch().seq_length();
  data::Microbatch whole = src.samples(ids);
  whole.global_loss_tokens = whole.loss_tokens;
  std::vector<data::Microbatch> parts;
  for (int r = 0; r < rows; r += mbs) {
    parts.push_back(src.samples(std::span<const int64_t>(ids).subspan(size_t(r), size_t(mbs))));
    parts.back().global_loss_tokens = whole.loss_tokens;
  }
  int64_t lo = INT64_MAX, hi = 0;
  std::string counts;
  for (const auto& p : parts) {
    lo = std::min(lo, p.loss_tokens);
    hi = std::max(hi, p.loss_tokens);
    counts += fmt::format("{}{}", counts.empty() ? "" : ", ", p.loss_tokens);
  }
  s.notes.push_back(fmt::format("{} windows of {} tokens, {} loss-bearing; {} microbatches of {} with loss-bearing "
                                "tokens {}",
                                rows, T, whole.loss_tokens, parts.size(), mbs, counts));
  s.checks.push_back(check_le("smallest / largest microbatch loss-bearing tokens", double(lo) / double(hi),
                              tol::kAccumTokenSpread));

  // One microbatch of every window.
  kernels::cpu::CpuDevice dev_a(1), dev_b(1);
  model::GptStage one(c, model::StageRange::whole(c), dev_a, 1, model::StageShape{rows, T});
  one.zero_grads();
  Pass a;
  {
    const auto l = one.forward(0, whole);
    one.backward(0);
    a.loss = l.loss_sum / double(whole.loss_tokens);
    a.grads.assign(one.grads(), one.grads() + one.param_count());
  }
  // Accumulated microbatches.
  model::GptStage acc(c, model::StageRange::whole(c), dev_b, 1, model::StageShape{mbs, T});
  acc.zero_grads();
  Pass b;
  const double m = double(parts.size());
  for (auto p : parts) {
    // The broken objective: each microbatch's own mean, then the mean over microbatches.
    if (ctx.break_loss_normalization) p.global_loss_tokens = int64_t(m) * std::max<int64_t>(p.loss_tokens, 1);
    const auto l = acc.forward(0, p);
    acc.backward(0);
    b.loss += ctx.break_loss_normalization ? l.loss_sum / double(std::max<int64_t>(l.loss_tokens, 1)) / m
                                           : l.loss_sum;
  }
  if (!ctx.break_loss_normalization) b.loss /= double(whole.loss_tokens);
  b.grads.assign(acc.grads(), acc.grads() + acc.param_count());

  s.notes.push_back(fmt::format("loss: one microbatch {:.9f}, accumulated {:.9f}", a.loss, b.loss));
  s.checks.push_back(check_le("loss: |accumulated - one microbatch| / one microbatch", std::fabs(b.loss - a.loss) / a.loss,
                              tol::kAccumLossRel));
  double worst = 0;
  std::string worst_name;
  for (const auto& t : one.registry().tensors()) {
    double diff = 0, scale = 0;
    for (int64_t i = t.offset; i < t.offset + t.numel; ++i) {
      diff = std::max(diff, double(std::fabs(a.grads[size_t(i)] - b.grads[size_t(i)])));
      scale = std::max(scale, double(std::fabs(a.grads[size_t(i)])));
    }
    const double rel = scale > 0 ? diff / scale : diff;
    if (rel > worst || worst_name.empty()) {
      worst = rel;
      worst_name = t.name;
    }
  }
  s.checks.push_back(check_le(fmt::format("gradients: worst tensor ({}) max |accumulated - one| / max |one|", worst_name),
                              worst, tol::kAccumGradRel));
  s.seconds = seconds_since(t0);
  s.decide();
  return s;
}

}  // namespace troupe::acceptance
