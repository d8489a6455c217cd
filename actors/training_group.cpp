#include "actors/training_group.h"

#include <chrono>
#include <mutex>

#include <spdlog/spdlog.h>

#include "actors/coordinator_actor.h"
#include "actors/loader_actor.h"
#include "actors/message_types.h"
#include "actors/optimizer_actor.h"
#include "actors/stage_actor.h"
#include "engine/topology.h"

namespace troupe::actors {
namespace {

Strategy strategy_of(SupervisionConfig::Strategy s) {
  switch (s) {
    case SupervisionConfig::ONE_FOR_ONE: return Strategy::OneForOne;
    case SupervisionConfig::ONE_FOR_ALL: return Strategy::OneForAll;
    case SupervisionConfig::REST_FOR_ONE: return Strategy::RestForOne;
  }
  return Strategy::OneForAll;
}

// The group's communicators. A failure aborts them; the next start of the group
// builds fresh ones (an aborted group cannot be used again).
struct SharedComms {
  std::mutex mu;
  engine::Topology topo;
  std::chrono::milliseconds timeout{120000};
  std::shared_ptr<engine::CommPlan> plan;
  bool aborted = true;

  std::shared_ptr<engine::CommPlan> current() {
    std::lock_guard lock(mu);
    if (aborted) {
      plan = std::make_shared<engine::CommPlan>(engine::make_inprocess_comms(topo, timeout));
      aborted = false;
    }
    return plan;
  }
  void abort(const std::string& why) {
    std::lock_guard lock(mu);
    if (plan && !aborted) plan->abort_all(why);
    aborted = true;
  }
};

}  // namespace

SupervisorSpec training_group_spec(GroupArgs args) {
  const auto& c = args.config;
  const auto topo = engine::Topology::of(c);
  auto comms = std::make_shared<SharedComms>();
  comms->topo = topo;
  // A collective waits at most as long as the step watchdog allows (or 2 minutes).
  if (c.supervision().step_watchdog_s() > 0)
    comms->timeout = std::chrono::milliseconds(int64_t(c.supervision().step_watchdog_s() * 1000));

  SupervisorSpec spec;
  spec.path = "training";
  spec.strategy = strategy_of(c.supervision().training_strategy());
  spec.max_restarts = c.supervision().max_restarts();
  spec.period = std::chrono::milliseconds(int64_t(c.supervision().intensity_period_s() * 1000));

  for (int32_t d = 0; d < topo.dp; ++d)
    spec.children.push_back({engine::loader_path(d), Restart::Permanent,
                             [c, d](caf::event_based_actor* self, int) {
                               return spawn_loader(self, LoaderArgs{c, d});
                             }});
  for (const auto& r : topo.all_ranks())
    spec.children.push_back({engine::optim_path(r), Restart::Permanent,
                             [c, r, faults = args.faults](caf::event_based_actor* self, int) {
                               return spawn_optimizer(self, OptimizerArgs{c, r, faults});
                             }});
  for (const auto& r : topo.all_ranks())
    spec.children.push_back({engine::stage_path(r), Restart::Permanent,
                             [c, r, topo, comms, faults = args.faults](caf::event_based_actor* self, int) {
                               auto plan = comms->current();
                               return spawn_stage(self, StageArgs{c, r, plan->ranks[size_t(topo.index(r))], faults});
                             }});
  spec.children.push_back({engine::coordinator_path(), Restart::Permanent,
                           [c, faults = args.faults, metrics = args.metrics, client = args.client](
                               caf::event_based_actor* self, int) {
                             return spawn_coordinator(self, CoordinatorArgs{c, faults, metrics, client});
                           }});

  // Once the whole group is up (first start or a restart), the coordinator wires it.
  spec.on_start = [](caf::event_based_actor* self, const Registry& all, const std::vector<std::string>& started) {
    if (started.empty()) return;
    auto it = all.find(engine::coordinator_path());
    if (it != all.end()) self->send(it->second, wire_atom::value, all);
  };
  spec.on_failure = [comms](const std::string& path, const std::string& reason) {
    spdlog::error("{} failed: {}", path, reason);
    comms->abort(path + " failed: " + reason);
  };
  spec.on_exit = std::move(args.on_exit);
  return spec;
}

}  // namespace troupe::actors
