// Rung 1, boundary masks (docs/acceptance.md, part "First"): on windows of the acceptance
// dataset packed by the data library, the whole small model checks
//   - document-mask invariance: replace the first document of a two-document window
//     (same length, same positions and segments); the second document's logits do not
//     move (and a control: changing the second document itself does move them);
//   - padding: whatever the padding positions hold, loss and every gradient are
//     bitwise the same, and no padding position bears loss;
//   - EOD: the prediction of EOD bears loss and gradient, the prediction out of EOD
//     (into the next document or padding) bears none, and training lowers EOD's loss.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <set>

#include <fmt/format.h>

#include "acceptance/dataset.h"
#include "acceptance/measure.h"
#include "acceptance/rungs.h"
#include "acceptance/small_config.h"
#include "acceptance/tolerances.h"
#include "config/derived.h"
#include "data/batch_source.h"
#include "kernels/cpu/cpu_device.h"
#include "model/gpt_stage.h"
#include "engine/reference_trainer.h"

namespace troupe::acceptance {
namespace {

// Positions [0, used) hold tokens, [used, T) padding.
int used_positions(const data::Microbatch& mb) { return mb.seq - int(mb.padding_tokens); }

// A window with padding and at least two documents before it.
bool has_two_documents_and_padding(const data::Microbatch& mb) {
  if (mb.padding_tokens <= 0) return false;
  std::set<int32_t> segs(mb.segments.begin(), mb.segments.begin() + used_positions(mb));
  return segs.size() >= 2;
}

struct Forward {
  double loss_sum = 0;
  int64_t loss_tokens = 0;
  std::vector<float> logits;  // [T, Vp] after forward
  std::vector<float> losses;  // [T]
  std::vector<float> dlogits; // [T, Vp] after backward
  std::vector<float> grads;   // the whole flat gradient buffer
};

// Forward (and backward) of a one-row microbatch through the whole model from its
// initial weights.
Forward run_window(const Config& c, data::Microbatch mb) {
  kernels::cpu::CpuDevice device(1);
  model::GptStage model(c, model::StageRange::whole(c), device, 1, model::StageShape{1, mb.seq});
  mb.global_loss_tokens = std::max<int64_t>(mb.loss_tokens, 1);
  Forward f;
  model.zero_grads();
  const auto loss = model.forward(0, mb);
  f.loss_sum = loss.loss_sum;
  f.loss_tokens = loss.loss_tokens;
  const size_t Vp = size_t(config::padded_vocab(c));
  const size_t T = size_t(mb.seq);
  f.logits.assign(model.logits(0), model.logits(0) + T * Vp);
  f.losses.assign(model.token_losses(0), model.token_losses(0) + T);
  model.backward(0);
  f.dlogits.assign(model.logits(0), model.logits(0) + T * Vp);
  f.grads.assign(model.grads(), model.grads() + model.param_count());
  return f;
}

// Largest |a - b| over rows `rows` of [T, ld] matrices, first `cols` columns.
double max_row_diff(const std::vector<float>& a, const std::vector<float>& b, const std::vector<int>& rows, int ld,
                    int cols) {
  double m = 0;
  for (int r : rows)
    for (int j = 0; j < cols; ++j)
      m = std::max(m, double(std::fabs(a[size_t(r) * ld + j] - b[size_t(r) * ld + j])));
  return m;
}

int64_t differing(const std::vector<float>& a, const std::vector<float>& b) {
  int64_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return n;
}

}  // namespace

Section boundary_masks(const LadderContext& ctx) {
  const auto t0 = std::chrono::steady_clock::now();
  Section s;
  s.name = "boundary masks";
  s.purpose =
      "On a packed window with two documents and padding: the second document's logits do not depend on the first, "
      "padding bears no loss or gradient, EOD is predicted with loss and nothing is predicted out of it.";
  const Config c = for_run(ctx.small, ctx.runs_root, "boundary", 1);
  const auto src = data::BatchSource::open(c);
  const int V = c.model().vocab_size();
  const int Vp = int(config::padded_vocab(c));

  // The first window (in sample-ID order) with two documents and padding, and one
  // that is a long document's middle (no boundary at all).
  int64_t id = -1, long_id = -1;
  for (int64_t k = 0; k < src.samples_per_epoch() && (id < 0 || long_id < 0); ++k) {
    const int64_t ids[] = {k};
    const auto mb = src.samples(ids);
    if (id < 0 && has_two_documents_and_padding(mb)) id = k;
    if (long_id < 0 && mb.padding_tokens == 0 &&
        std::all_of(mb.segments.begin(), mb.segments.end(), [&](int32_t v) { return v == mb.segments[0]; }))
      long_id = k;
  }
  s.checks.push_back(check_true("the dataset has a window with two documents and padding", id >= 0));
  s.checks.push_back(check_true("the dataset has a window inside one long document", long_id >= 0));
  if (id < 0 || long_id < 0) {
    s.decide();
    return s;
  }
  const int64_t ids[] = {id};
  const data::Microbatch base = src.samples(ids);
  const int T = base.seq, used = used_positions(base);
  const int32_t seg_a = base.segments[0];
  int b_begin = 0;
  while (b_begin < used && base.segments[size_t(b_begin)] == seg_a) ++b_begin;
  const int32_t seg_b = base.segments[size_t(b_begin)];
  int b_end = b_begin;
  while (b_end < used && base.segments[size_t(b_end)] == seg_b) ++b_end;
  s.notes.push_back(fmt::format("window: sample {} of {} positions: document A at [0, {}), document B at [{}, {}), "
                                "padding at [{}, {}); {} loss-bearing tokens",
                                id, T, b_begin, b_begin, b_end, used, T, base.loss_tokens));

  // Masks as packed: no loss on padding or out of an EOD; loss on every EOD target.
  {
    int64_t padding_with_loss = 0, eod_out_with_loss = 0, eod_target_without_loss = 0, eod_targets = 0;
    for (int i = 0; i < T; ++i) {
      const float mask = base.loss_mask[size_t(i)];
      if (i >= used) padding_with_loss += mask != 0;
      else if (base.tokens[size_t(i)] == kEod) eod_out_with_loss += mask != 0;
      else if (base.targets[size_t(i)] == kEod) {
        ++eod_targets;
        eod_target_without_loss += mask != 1;
      }
    }
    s.checks.push_back(check_eq("padding positions with loss", double(padding_with_loss), 0));
    s.checks.push_back(check_eq("predictions out of an EOD with loss", double(eod_out_with_loss), 0));
    s.checks.push_back(check_ge("EOD targets in the window", double(eod_targets), 2));
    s.checks.push_back(check_eq("EOD targets without loss", double(eod_target_without_loss), 0));
  }

  const Forward ref = run_window(c, base);
  std::vector<int> b_rows;
  for (int i = b_begin; i < b_end; ++i) b_rows.push_back(i);

  // Document-mask invariance: document A replaced, same length, positions, segments.
  {
    data::Microbatch other = base;
    for (int i = 0; i < b_begin; ++i)
      if (other.tokens[size_t(i)] != kEod) other.tokens[size_t(i)] = (other.tokens[size_t(i)] + 37) % 256;
    for (int i = 0; i + 1 < b_begin; ++i) other.targets[size_t(i)] = other.tokens[size_t(i + 1)];
    const Forward f = run_window(c, other);
    s.checks.push_back(check_le("max |logit change| at document B, document A replaced",
                                max_row_diff(ref.logits, f.logits, b_rows, Vp, V), tol::kMaskLogitAbs));
    // Control: change B's first token; B's later logits must move.
    data::Microbatch control = base;
    control.tokens[size_t(b_begin)] = (control.tokens[size_t(b_begin)] + 37) % 256;
    if (b_begin > 0) control.targets[size_t(b_begin - 1)] = control.tokens[size_t(b_begin)];
    const Forward g = run_window(c, control);
    std::vector<int> later(b_rows.begin() + 1, b_rows.end());
    s.checks.push_back(check_ge("control: max |logit change| at document B when its own first token changes",
                                max_row_diff(ref.logits, g.logits, later, Vp, V), tol::kMaskControlMin));
  }

  // Padding: other tokens and targets at the padding positions change nothing.
  {
    data::Microbatch other = base;
    for (int i = used; i < T; ++i) {
      other.tokens[size_t(i)] = 'x';
      other.targets[size_t(i)] = 'y';
    }
    const Forward f = run_window(c, other);
    s.checks.push_back(check_eq("loss sum differs when the padding changes (bitwise)",
                                double(f.loss_sum != ref.loss_sum), 0));
    s.checks.push_back(check_eq("gradient elements that differ when the padding changes (bitwise)",
                                double(differing(f.grads, ref.grads)), 0));
    double pad_grad = 0;
    for (int i = used; i < T; ++i)
      for (int j = 0; j < Vp; ++j) pad_grad = std::max(pad_grad, double(std::fabs(ref.dlogits[size_t(i) * Vp + j])));
    s.checks.push_back(check_eq("max |d loss / d logit| at padding positions", pad_grad, 0));
    double pad_loss = 0;
    for (int i = used; i < T; ++i) pad_loss += ref.losses[size_t(i)] * base.loss_mask[size_t(i)];
    s.checks.push_back(check_eq("masked loss summed over padding positions", pad_loss, 0));
  }

  // EOD: gradient where EOD is the target; none out of an EOD.
  std::vector<int> eod_rows;
  {
    double min_eod_grad = INFINITY, max_out_grad = 0;
    for (int i = 0; i < used; ++i) {
      if (base.tokens[size_t(i)] == kEod)
        for (int j = 0; j < Vp; ++j)
          max_out_grad = std::max(max_out_grad, double(std::fabs(ref.dlogits[size_t(i) * Vp + j])));
      else if (base.targets[size_t(i)] == kEod) {
        eod_rows.push_back(i);
        min_eod_grad = std::min(min_eod_grad, double(std::fabs(ref.dlogits[size_t(i) * Vp + kEod])));
      }
    }
    s.checks.push_back(check_ge("min |d loss / d logit[EOD]| where EOD is the target", min_eod_grad, 1e-6));
    s.checks.push_back(check_eq("max |d loss / d logit| out of an EOD", max_out_grad, 0));
  }

  // EOD learned: ten updates on the window lower the loss of its EOD predictions.
  {
    kernels::cpu::CpuDevice device(1);
    engine::ReferenceTrainer trainer(c, device);
    data::Microbatch mb = base;
    mb.global_loss_tokens = mb.loss_tokens;
    const data::Microbatch one[] = {mb};
    auto eod_loss = [&] {
      const auto l = trainer.model().forward(0, mb);
      (void)l;
      const float* losses = trainer.model().token_losses(0);
      double sum = 0;
      for (int i : eod_rows) sum += losses[size_t(i)];
      return sum / double(eod_rows.size());
    };
    const double before = eod_loss();
    constexpr int kUpdates = 10;
    for (int k = 0; k < kUpdates; ++k) trainer.step(one);
    const double after = eod_loss();
    s.notes.push_back(fmt::format("EOD loss (mean over its {} positions): {:.4f} before, {:.4f} after {} updates on the "
                                  "window",
                                  eod_rows.size(), before, after, kUpdates));
    s.checks.push_back(check_le("EOD loss after 10 updates / before", after / before, 0.99));
  }

  // A long document's middle window: no boundary, every prediction bears loss.
  {
    const int64_t lid[] = {long_id};
    const auto mb = src.samples(lid);
    s.checks.push_back(check_eq("loss-bearing tokens of a window inside one long document", double(mb.loss_tokens),
                                double(mb.seq)));
  }
  s.seconds = seconds_since(t0);
  s.decide();
  return s;
}

}  // namespace troupe::acceptance
