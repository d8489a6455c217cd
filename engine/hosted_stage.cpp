#include "engine/hosted_stage.h"

#include <fmt/format.h>

#include "comm/ordered_reduction.h"
#include "engine/stage_worker.h"

namespace troupe::engine {

std::shared_ptr<model::GptStage> shared_model(const RankComms& comms, int32_t physical_replica,
                                              const std::shared_ptr<kernels::Device>& device,
                                              const std::function<std::unique_ptr<model::GptStage>()>& make,
                                              bool& made) {
  HostedStage& h = *comms.hosted;
  std::lock_guard lock(h.mu);
  made = !h.model;
  if (made) {
    h.device = device;
    h.model = make();
    const size_t n = comms.ordered_reduction->accumulator_size(physical_replica);
    h.accumulator = device->allocate_as(kernels::MemoryCategory::kGradients, int64_t(std::max<size_t>(n, 1)));
    comms.ordered_reduction->attach(physical_replica, h.accumulator.f32(), h.model->params());
  } else if (h.device != device) {
    throw std::logic_error("hosted stage: a hosted rank was given a device other than its physical rank's");
  }
  return h.model;
}

void add_hosting(CommPlan& plan, const Config& c, std::chrono::milliseconds timeout) {
  const auto t = Topology::of(c);
  if (!t.hosts_several()) return;
  for (int32_t p = 0; p < t.pp; ++p)
    for (int32_t k = 0; k < t.tp; ++k) {
      const size_t n = size_t(stage_registry(c, {0, p, k}).total());
      auto reduction = std::make_shared<comm::OrderedReduction>(
          t.dp, t.physical_replicas(), n, fmt::format("dp[pp{}/tp{}] ({} logical on {} physical)", p, k, t.dp,
                                                      t.physical_replicas()),
          timeout);
      plan.ordered_reductions.push_back(reduction);
      for (int32_t q = 0; q < t.physical_replicas(); ++q) {
        auto& rc = plan.ranks[size_t(t.index({q, p, k}))];
        rc.hosted = std::make_shared<HostedStage>();
        rc.ordered_reduction = reduction;
      }
    }
}

}  // namespace troupe::engine
