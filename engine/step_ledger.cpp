#include "engine/step_ledger.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

namespace troupe::engine {
namespace {

template <class T>
void put(std::vector<std::optional<T>>& slots, size_t i, T value, int32_t& seen, const std::string& what) {
  if (i >= slots.size()) throw std::logic_error(what + ": outside the topology");
  if (slots[i]) throw std::logic_error(what + ": reported twice");
  slots[i] = std::move(value);
  ++seen;
}

}  // namespace

StepLedger::StepLedger(const Topology& t, msg::StepKind kind, int64_t step, int32_t microbatches)
    : topo_(t),
      kind_(kind),
      step_(step),
      microbatches_(microbatches),
      losses_(size_t(t.dp) * microbatches),
      counts_(size_t(t.dp)),
      norms_(kind == msg::StepKind::Train ? size_t(t.ranks()) : 0),
      stages_(size_t(t.ranks())),
      updates_(size_t(t.ranks())),
      applied_(size_t(t.ranks())) {}

void StepLedger::add(const msg::LossReport& r) {
  const auto what = fmt::format("step {} loss of dp{}/mb{}", r.step, r.dp, r.microbatch);
  if (r.step != step_ || r.kind != kind_) throw std::logic_error(what + ": not the current step");
  if (r.microbatch < 0 || r.microbatch >= microbatches_) throw std::logic_error(what + ": no such microbatch");
  put(losses_, size_t(r.dp) * microbatches_ + r.microbatch, r, losses_seen_, what);
}

void StepLedger::add(const msg::ReplicaCounts& r) {
  const auto what = fmt::format("step {} counts of dp{}", r.step, r.dp);
  if (r.step != step_ || r.kind != kind_) throw std::logic_error(what + ": not the current step");
  put(counts_, size_t(r.dp), r, counts_seen_, what);
}

void StepLedger::add(const msg::NormPartial& r) {
  const auto what = fmt::format("step {} norm partial of {}", r.step, optim_path(r.rank));
  if (r.step != step_ || kind_ != msg::StepKind::Train) throw std::logic_error(what + ": not the current step");
  const size_t at = size_t(topo_.index(r.rank));
  put(norms_, at, r.sum_squares, norms_seen_, what);
  if (layer_norms_.size() < norms_.size()) layer_norms_.resize(norms_.size());
  layer_norms_[at].clear();
  for (size_t i = 0; i < r.layers.size() && i < r.layer_sum_squares.size(); ++i)
    layer_norms_[at].emplace_back(r.layers[i], r.layer_sum_squares[i]);
}

std::vector<std::pair<std::string, double>> StepLedger::layer_sum_squares() const {
  std::vector<std::pair<std::string, double>> out;
  for (const auto& shard : layer_norms_)
    for (const auto& [layer, sum] : shard) {
      auto it = std::find_if(out.begin(), out.end(), [&](const auto& e) { return e.first == layer; });
      if (it == out.end()) out.emplace_back(layer, sum);
      else it->second += sum;
    }
  return out;
}

void StepLedger::add(const msg::StageDone& r) {
  const auto what = fmt::format("step {} done of {}", r.step, stage_path(r.rank));
  if (r.step != step_ || r.kind != kind_) throw std::logic_error(what + ": not the current step");
  const size_t at = size_t(topo_.index(r.rank));
  put(stages_, at, r.timing, stages_seen_, what);
  updates_[at] = r.update;
  applied_[at] = r.applied;
}

std::string StepLedger::applied_mismatch(const msg::UpdateCommand& decided) const {
  auto describe = [](const msg::UpdateCommand& u) {
    return fmt::format("step {} at lr {} with clip factor {}{}", u.step, u.lr, u.clip_factor,
                       u.skip ? ", skipped" : "");
  };
  for (const auto& rank : topo_.all_ranks()) {
    const auto& a = applied_[size_t(topo_.index(rank))];
    const bool same = a.step == decided.step && a.skip == decided.skip && a.lr == decided.lr &&
                      a.clip_factor == decided.clip_factor;
    if (!same)
      return fmt::format("{} applied the update of {}, but the coordinator decided {}", optim_path(rank),
                         describe(a), describe(decided));
  }
  return {};
}

msg::UpdateSums StepLedger::update_sums() const {
  msg::UpdateSums total;
  for (const auto& u : updates_) {
    total.update_sum_squares += u.update_sum_squares;
    total.weight_sum_squares += u.weight_sum_squares;
  }
  return total;
}

std::vector<std::vector<msg::SegmentLoss>> StepLedger::segment_losses() const {
  std::vector<std::vector<msg::SegmentLoss>> out;
  for (const auto& l : losses_) out.push_back(l ? l->segments : std::vector<msg::SegmentLoss>{});
  return out;
}

double StepLedger::total_sum_squares() const {
  double s = 0;
  for (const auto& n : norms_) s += n.value_or(0.0);
  return s;
}

std::vector<double> StepLedger::stage_sum_squares() const {
  std::vector<double> out(size_t(topo_.pp), 0.0);
  for (const auto& r : topo_.all_ranks()) out[size_t(r.pp)] += norms_[size_t(topo_.index(r))].value_or(0.0);
  return out;
}

double StepLedger::loss_sum() const {
  double s = 0;
  for (const auto& l : losses_) s += l ? l->loss_sum : 0.0;
  return s;
}

int64_t StepLedger::loss_tokens() const {
  int64_t n = 0;
  for (const auto& l : losses_) n += l ? l->loss_tokens : 0;
  return n;
}

data::BatchCounts StepLedger::counts() const {
  data::BatchCounts c;
  for (const auto& r : counts_) {
    if (!r) continue;
    c.samples += r->counts.samples;
    c.input_tokens += r->counts.input_tokens;
    c.loss_tokens += r->counts.loss_tokens;
    c.padding_tokens += r->counts.padding_tokens;
  }
  return c;
}

std::vector<int64_t> StepLedger::sample_ids() const {
  std::vector<int64_t> ids;
  for (const auto& r : counts_)
    if (r) ids.insert(ids.end(), r->sample_ids.begin(), r->sample_ids.end());
  return ids;
}

std::vector<double> StepLedger::microbatch_losses() const {
  std::vector<double> out;
  for (const auto& l : losses_) out.push_back(l ? l->loss_sum : 0.0);
  return out;
}

std::vector<int64_t> StepLedger::microbatch_loss_tokens() const {
  std::vector<int64_t> out;
  for (const auto& l : losses_) out.push_back(l ? l->loss_tokens : 0);
  return out;
}

std::vector<msg::StageTiming> StepLedger::timings() const {
  std::vector<msg::StageTiming> out;
  for (const auto& s : stages_) out.push_back(s.value_or(msg::StageTiming{}));
  return out;
}

std::vector<metrics::StageMemoryRecord> StepLedger::stage_memory() const {
  std::vector<metrics::StageMemoryRecord> out;
  const auto ranks = topo_.all_ranks();
  for (size_t i = 0; i < stages_.size() && i < ranks.size(); ++i) {
    const msg::StageMemory m = stages_[i] ? stages_[i]->memory : msg::StageMemory{};
    out.push_back({stage_path(ranks[i]), m.weights, m.gradients, m.optimizer_state, m.activations, m.scratch,
                   m.planned_activations});
  }
  return out;
}

std::string StepLedger::missing() const {
  std::vector<std::string> parts;
  for (int32_t d = 0; d < topo_.dp; ++d) {
    for (int32_t mb = 0; mb < microbatches_; ++mb)
      if (!losses_[size_t(d) * microbatches_ + mb]) parts.push_back(fmt::format("loss dp{}/mb{}", d, mb));
    if (!counts_[size_t(d)]) parts.push_back(fmt::format("counts {}", loader_path(d)));
  }
  for (const auto& r : topo_.all_ranks()) {
    const size_t i = size_t(topo_.index(r));
    if (!norms_.empty() && !norms_[i]) parts.push_back(fmt::format("norm {}", optim_path(r)));
    if (!stages_[i]) parts.push_back(fmt::format("done {}", stage_path(r)));
  }
  std::string out;
  for (size_t i = 0; i < parts.size() && i < 8; ++i) out += (i ? ", " : "") + parts[i];
  if (parts.size() > 8) out += fmt::format(" and {} more", parts.size() - 8);
  return out;
}

}  // namespace troupe::engine
