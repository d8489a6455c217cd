#include "engine/hosted_stage.h"

#include <fmt/format.h>

#include "comm/ordered_reduction.h"
#include "engine/stage_worker.h"

namespace troupe::engine {

std::shared_ptr<model::GptStage> shared_model(const RankComms& comms,
                                              const std::shared_ptr<kernels::Device>& device,
                                              const std::function<std::unique_ptr<model::GptStage>()>& make,
                                              bool& made) {
  HostedStage& h = *comms.hosted;
  std::lock_guard lock(h.mu);
  made = !h.model;
  if (made) {
    h.device = device;
    h.model = make();
    const size_t n = comms.ordered_reduction->accumulator_size();
    h.accumulator = device->allocate_as(kernels::MemoryCategory::kGradients, int64_t(std::max<size_t>(n, 1)));
    comms.ordered_reduction->attach(h.accumulator.f32(), h.model->params());
  } else if (h.device != device) {
    throw std::logic_error("hosted stage: a hosted rank was given a device other than its physical rank's");
  }
  return h.model;
}

void add_hosting(RankComms& host, const Config& c, const Rank& r, std::chrono::milliseconds timeout) {
  const auto t = Topology::logical(c);
  host.hosted = std::make_shared<HostedStage>();
  host.ordered_reduction = std::make_shared<comm::OrderedReduction>(
      host.data_parallel, t.dp, size_t(stage_registry(c, r).total()), timeout);
}

CommPlan make_hosting_comms(const Config& c, const Topology& t, std::chrono::milliseconds timeout) {
  // The groups of the physical layout, indexed as its host ranks are (Topology::index of
  // (q, pp, tp) is the same under both); the other logical ranks have none of their own.
  CommPlan plan = make_inprocess_comms(t.physical_layout(), timeout);
  plan.ranks.resize(size_t(t.ranks()));
  for (const auto& r : t.physical_layout().all_ranks()) {
    auto& host = plan.ranks[size_t(t.index(r))];
    add_hosting(host, c, r, timeout);
    plan.ordered_reductions.push_back(host.ordered_reduction);
  }
  return plan;
}

}  // namespace troupe::engine
