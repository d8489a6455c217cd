#include "engine/reference_trainer.h"

#include <stdexcept>

#include "optim/grad_clip.h"

namespace troupe::engine {

ReferenceTrainer::ReferenceTrainer(const Config& c, kernels::Device& device)
    : config_(c),
      device_(device),
      model_(c, model::StageRange::whole(c), device, 1),
      adamw_(device, optim::AdamWHyper::from_config(c), model_.registry().decay_spans(), {0, model_.param_count()}),
      schedule_(c),
      norm_ranges_(model_.registry().norm_ranges()) {}

StepReport ReferenceTrainer::accumulate(std::span<const data::Microbatch> microbatches) {
  double sumsq = 0;
  return accumulate(microbatches, &sumsq);
}

StepReport ReferenceTrainer::accumulate(std::span<const data::Microbatch> microbatches, double* sumsq) {
  if (microbatches.empty()) throw std::invalid_argument("ReferenceTrainer: a global batch needs at least one microbatch");
  StepReport r;
  int64_t tokens = 0;
  for (const auto& mb : microbatches) tokens += mb.loss_tokens;
  for (size_t i = 0; i < microbatches.size(); ++i)
    if (microbatches[i].global_loss_tokens != tokens)
      throw std::invalid_argument("ReferenceTrainer: microbatch " + std::to_string(i) + " says global_loss_tokens = " +
                                  std::to_string(microbatches[i].global_loss_tokens) + " but the batch's microbatches hold " +
                                  std::to_string(tokens) + " loss-bearing tokens");
  model_.zero_grads();
  for (const auto& mb : microbatches) {
    const model::StageLoss l = model_.forward(0, mb);
    model_.backward(0);
    r.loss_sum += l.loss_sum;
    r.loss_tokens += l.loss_tokens;
    r.samples += mb.batch;
  }
  if (r.loss_tokens != tokens)
    throw std::invalid_argument("ReferenceTrainer: loss masks hold " + std::to_string(r.loss_tokens) +
                                " loss-bearing tokens, the microbatches' loss_tokens say " + std::to_string(tokens));
  r.loss = r.loss_tokens > 0 ? r.loss_sum / double(r.loss_tokens) : 0.0;
  *sumsq = optim::sum_squares(device_, model_.grads(), norm_ranges_);
  r.grad_norm = optim::decide(*sumsq, 0).norm;
  return r;
}

StepReport ReferenceTrainer::step(std::span<const data::Microbatch> microbatches) {
  double sumsq = 0;
  StepReport r = accumulate(microbatches, &sumsq);
  const optim::ClipDecision d = optim::decide(sumsq, config_.optimizer().clip_grad());
  r.lr = schedule_.lr_for_update(successful_);
  consumed_ += r.samples;
  if (d.skip) {
    r.skipped = true;
    ++skipped_;
    return r;
  }
  r.clipped = d.clipped;
  r.clip_factor = d.factor;
  adamw_.step(model_.params(), model_.grads(), r.lr, d.factor);
  ++successful_;
  return r;
}

void ReferenceTrainer::set_counters(int64_t successful, int64_t skipped, int64_t consumed) {
  successful_ = successful;
  skipped_ = skipped;
  consumed_ = consumed;
}

std::string ReferenceTrainer::describe_groups() const {
  std::string s;
  for (auto g : {model::DecayGroup::kDecay, model::DecayGroup::kNoDecay}) {
    const auto names = model_.registry().names(g);
    s += std::string(s.empty() ? "" : "; ") + model::decay_group_name(g) + " (" + std::to_string(names.size()) + "):";
    for (size_t i = 0; i < names.size(); ++i) s += (i ? ", " : " ") + names[i];
  }
  return s;
}

}  // namespace troupe::engine
