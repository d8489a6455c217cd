#include "actors/training_group.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/coordinator_actor.h"
#include "actors/loader_actor.h"
#include "actors/message_types.h"
#include "actors/optimizer_actor.h"
#include "actors/stage_actor.h"
#include "actors/unix_time.h"
#include "actors/writer_actor.h"
#include "engine/checkpointing.h"
#include "engine/rank_device.h"
#include "engine/stage_worker.h"
#include "engine/topology.h"
#include "sched/schedule_verifier.h"

namespace troupe::actors {
void watch_for_hangs(ChildSpec& child, const SupervisionConfig& s) {
  if (s.hang_timeout_s() <= 0) return;
  child.heartbeat = std::chrono::milliseconds(std::max<int64_t>(1, int64_t(s.heartbeat_interval_s() * 1000)));
  child.hang_limit = std::chrono::milliseconds(int64_t(s.hang_timeout_s() * 1000));
}

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
// On GPUs each with one rank, the plan also holds the ranks' devices, over which its
// data-parallel, tensor-parallel and embedding groups are NCCL communicators
// (engine::make_group_comms).
struct SharedComms {
  std::mutex mu;
  std::shared_ptr<const Config> config;
  engine::Topology topo;  // the group's layout on its placement
  std::chrono::milliseconds timeout{120000};
  std::shared_ptr<engine::CommPlan> plan;
  bool aborted = true;
  bool announced = false;

  std::shared_ptr<engine::CommPlan> current() {
    std::lock_guard lock(mu);
    if (aborted) {
      plan = std::make_shared<engine::CommPlan>(engine::make_group_comms(*config, topo, timeout));
      aborted = false;
      if (!plan->devices.empty() && !std::exchange(announced, true))
        spdlog::info("training: one GPU per rank: data-parallel, tensor-parallel and embedding collectives run in "
                     "NCCL groups on device memory");
    }
    return plan;
  }
  void abort(const std::string& why) {
    std::lock_guard lock(mu);
    if (plan && !aborted) plan->abort_all(why);
    aborted = true;
  }
};

bool is_loader(const std::string& path) { return path.rfind("loader/", 0) == 0; }

}  // namespace

metrics::FailureRecord alone_failure(const std::string& path, const std::string& reason, int64_t max_step) {
  metrics::FailureRecord f;
  f.step = max_step + 1;
  f.actor = path;
  f.reason = reason;
  f.action = "restart alone";
  f.wall_time = unix_now();
  for (const char* phase : {"forward", "backward", "reduce", "optimizer", "checkpoint_write"})
    if (reason.find(std::string("during ") + phase) != std::string::npos) f.phase = phase;
  return f;
}

namespace {

}  // namespace

SupervisorSpec training_group_spec(GroupArgs args) {
  const auto config = args.config;  // the run's one Config, shared by every actor
  const Config& c = *config;
  // The wiring of a start, derived from the logical layout and the placement: which
  // stage hosts which logical ranks, the communicator groups, the devices, the workers'
  // actors. In one process the run state's placement, fixed for this group (a rollback
  // starts another group); in cluster mode the cluster's, read again at every start of
  // the group, as a lost worker without a spare shrinks it (actors/cluster/cluster.h).
  const auto topo = args.run_state.topology(c);
  auto cluster = args.cluster;
  auto placed_now = [cluster, topo] { return cluster ? cluster->placed() : topo; };
  auto comms = std::make_shared<SharedComms>();
  comms->config = config;
  comms->topo = topo;
  comms->timeout = engine::collective_timeout(c);

  SupervisorSpec spec;
  spec.path = "training";
  spec.strategy = strategy_of(c.supervision().training_strategy());
  spec.max_restarts = c.supervision().max_restarts();
  spec.period = std::chrono::milliseconds(int64_t(c.supervision().intensity_period_s() * 1000));
  spec.directory = args.directory;

  auto resume = args.resume;
  auto cluster_comms = args.cluster_comms;
  // Cluster mode: what a worker needs to place one of the group's actors.
  auto skip = std::make_shared<const std::vector<int64_t>>(args.run_state.skip_samples);
  auto placement = [cluster, resume, skip, faults = args.faults](const std::string& kind, const engine::Rank& r,
                                                                   int64_t generation, int incarnation) {
    PlaceActor p;
    p.kind = kind;
    p.rank = r;
    p.physical_replicas = cluster->placed().physical_replicas();
    p.generation = generation;
    p.incarnation = incarnation;
    if (kind == "loader") {
      p.skip_samples = *skip;
    } else if (auto ck = resume->current()) {
      if (const auto m = resume->mirror_start()) {
        // From the state mirror: the workers fetch the shards from the live holders.
        p.mirror_step = m->step;
        p.mirror_manifest = m->manifest.SerializeAsString();
        for (const auto& [rank, worker] : m->sources) {
          p.mirror_ranks.push_back(rank);
          p.mirror_hosts.push_back(cluster->live_agent(worker));
        }
      } else {
        p.resume_dir = ck->dir();
      }
    }
    p.fired = faults->fired_indices();
    return p;
  };
  // Each part receives its piece of the Config, cut here once per group.
  const auto loader_config = LoaderConfig::of(c);
  for (int32_t d = 0; d < topo.dp; ++d) {
    ChildSpec child{engine::loader_path(d), Restart::Permanent,
                    [loader_config, d, skip, faults = args.faults, cluster, placement](caf::event_based_actor* self, int) {
                      if (cluster) return place_on_worker(self, *cluster, placement("loader", {d, 0, 0}, 0, 0));
                      return untyped_handle(spawn_loader(self, LoaderArgs{loader_config, d, faults, *skip}));
                    }};
    child.restart_alone = true;
    spec.children.push_back(std::move(child));
  }
  // A rank's stage and optimizer shard compute on one device (engine/rank_device.h): the
  // communicator plan's, when it made them, else one RankDevices hands out.
  auto devices = std::make_shared<engine::RankDevices>(config, topo);
  auto device_of = [comms, devices, topo](const engine::Rank& r, int incarnation) {
    const auto plan = comms->current();
    return plan->devices.empty() ? devices->get(r, incarnation) : plan->devices[size_t(topo.index(r))];
  };
  // Logical ranks hosted by one physical rank (Topology::hosts_several) get its round-0
  // rank's communicators and shared stage (engine/hosted_stage.h).
  const auto optimizer_config = OptimizerConfig::of(c);
  // The state mirror's timeline, fixed for this group (a rollback starts another group).
  const auto mirror = args.mirror;
  const auto mirror_timeline = mirror ? std::optional<int64_t>(mirror->timeline()) : std::nullopt;
  for (const auto& r : topo.all_ranks()) {
    const auto registry =
        cluster ? nullptr : std::make_shared<const model::ParameterRegistry>(engine::stage_registry(c, r));
    spec.children.push_back(
        {engine::optim_path(r), Restart::Permanent,
         [optimizer_config, registry, r, topo, comms, faults = args.faults, resume, dir = args.directory, cluster,
          placement, device_of, mirror_timeline](caf::event_based_actor* self, int incarnation) {
           if (cluster) return place_on_worker(self, *cluster, placement("optim", r, 0, incarnation));
           auto hosted = comms->current()->ranks[size_t(topo.index(topo.host_of(r)))].hosted;
           return untyped_handle(spawn_optimizer(self, OptimizerArgs{optimizer_config, registry, r, faults,
                                                                     resume->current(), dir, device_of(r, incarnation),
                                                                     std::move(hosted), mirror_timeline}));
         }});
  }
  // (In cluster mode the worker that hosts an actor cuts its piece.)
  const auto schedule =
      cluster ? nullptr : std::make_shared<const sched::PipelineSchedule>(sched::verified_pipeline_schedule(c));
  for (const auto& r : topo.all_ranks()) {
    const auto stage_spec =
        cluster ? nullptr : std::make_shared<const engine::StageSpec>(engine::StageSpec::of(c, r, schedule));
    spec.children.push_back(
        {engine::stage_path(r), Restart::Permanent,
         [stage_spec, r, topo, comms, resume, faults = args.faults, cluster, cluster_comms, placement, device_of](
             caf::event_based_actor* self, int incarnation) {
           if (cluster) return place_on_worker(self, *cluster, placement("stage", r, cluster_comms->current(), incarnation));
           auto plan = comms->current();
           return untyped_handle(spawn_stage(self, StageArgs{stage_spec, r, topo,
                                                             plan->ranks[size_t(topo.index(topo.host_of(r)))], faults,
                                                             resume->current(), {}, device_of(r, incarnation)}));
         }});
  }
  ChildSpec coordinator{engine::coordinator_path(), Restart::Permanent,
                        [config, placed_now, skip, faults = args.faults, dir = args.directory, book = args.book, resume,
                         inbox = args.metrics, client = args.client, cluster, mirror,
                         mirror_timeline](caf::event_based_actor* self, int) {
                          CoordinatorArgs a{config, placed_now(), *skip, faults, dir, book, inbox, resume->current(),
                                            client, {}, mirror, mirror_timeline.value_or(0)};
                          if (cluster) a.larger_placement_ready = [cluster] { return cluster->grow_target().has_value(); };
                          return untyped_handle(spawn_coordinator(self, std::move(a)));
                        }};
  watch_for_hangs(coordinator, c.supervision());
  spec.children.push_back(std::move(coordinator));

  // The whole group up (a first start or a restart): the coordinator wires it. A
  // loader restarted alone rejoins through the coordinator.
  spec.on_start = [cluster, mirror](caf::event_based_actor* self, const Registry& all,
                                    const std::vector<std::string>& started) {
    auto coordinator = all.find(engine::coordinator_path());
    if (started.empty() || coordinator == all.end()) return;
    // Writers and mirror keepers on the workers report to the coordinator: tell them the
    // new one; the keepers also get their buddies on this start's placement.
    if (cluster && std::find(started.begin(), started.end(), engine::coordinator_path()) != started.end()) {
      for (const auto& agent : cluster->live_agents()) self->send(agent, PeerHandles{coordinator->second});
      if (mirror)
        for (const auto& b : cluster->mirror_buddies()) self->send(b.host, b.buddy);
    }
    if (started.size() == 1 && is_loader(started[0]))
      self->send(coordinator->second, rejoin_atom::value, started[0], all.at(started[0]), all);
    else
      self->send(coordinator->second, wire_atom::value, all);
  };
  spec.on_failure = [comms, cluster_comms, resume, faults = args.faults, book = args.book, dir = args.directory,
                     inbox = args.metrics, mirror](const std::string& path, const std::string& reason) {
    auto f = alone_failure(path, reason, book->max_step_reached());
    if (!is_loader(path)) {
      f.action = "restart";
      f.restarts = book->restarts() + 1;
    }
    if (is_loader(path)) {
      f.action = "restart alone";
      spdlog::warn("{} failed: {}; restarting it alone", path, reason);
      book->failure(f, /*group_restart=*/false);
    } else {
      spdlog::error("{} failed: {}; the training group restarts from the {}", path, reason,
                    mirror ? "state mirror or the latest checkpoint, whichever is newer" : "latest checkpoint");
      if (cluster_comms)
        cluster_comms->abort(path + " failed: " + reason);
      else
        comms->abort(path + " failed: " + reason);
      faults->release_hangs();
      resume->invalidate();
      if (auto t = faults->last_fired_at()) book->fault_fired_at(*t);
      book->failure(f, /*group_restart=*/true);
    }
    post_metrics(*inbox, *dir, caf::make_message(f));
  };
  spec.on_exit = std::move(args.on_exit);
  if (cluster) add_cluster_hooks(spec, cluster);
  return spec;
}

void add_cluster_hooks(SupervisorSpec& spec, std::shared_ptr<Cluster> cluster) {
  spec.detached = true;
  spec.on_node_lost = [cluster](const std::string& path, const caf::node_id& node) {
    cluster->lost(node, fmt::format("the connection to its process dropped (first noticed through {}): the process "
                                    "died or stopped answering heartbeats",
                                    path));
  };
  spec.veto_restart = [cluster] { return cluster->exhausted(); };
}

SupervisorSpec writer_group_spec(std::shared_ptr<const Config> config, std::shared_ptr<engine::FaultPlan> faults,
                                 std::shared_ptr<Directory> directory, std::shared_ptr<RunBook> book,
                                 std::shared_ptr<engine::ShardCopies> copies, std::shared_ptr<Cluster> cluster) {
  const Config& c = *config;
  SupervisorSpec spec;
  spec.path = "writers";
  spec.strategy = Strategy::OneForOne;
  spec.max_restarts = std::max(3, c.supervision().max_restarts());
  spec.period = std::chrono::milliseconds(int64_t(c.supervision().intensity_period_s() * 1000));
  spec.directory = directory;
  for (const auto& r : engine::Topology::logical(c).all_ranks()) {
    if (!engine::writes_shard(c, r)) continue;
    // The writer's piece of the Config (in cluster mode the worker cuts its own).
    const auto layout = cluster ? nullptr : std::make_shared<const ckpt::FlatLayout>(engine::shard_layout(c, r));
    spec.children.push_back({engine::writer_path(r), Restart::Permanent,
                             [layout, r, faults, directory, copies, cluster](caf::event_based_actor* self, int) {
                               if (cluster) {
                                 PlaceActor p;
                                 p.kind = "writer";
                                 p.rank = r;
                                 p.fired = faults->fired_indices();
                                 return place_on_worker(self, *cluster, std::move(p));
                               }
                               return untyped_handle(spawn_writer(self, WriterArgs{layout, r, faults, directory, copies}));
                             }});
  }
  spec.on_failure = [directory, book, faults](const std::string& path, const std::string& reason) {
    spdlog::error("{} failed: {}; its checkpoint fails, the next one retries", path, reason);
    faults->release_hangs();  // an injected hang's thread ends; its successor takes over
    book->failure(alone_failure(path, reason, book->max_step_reached()), /*group_restart=*/false);
    if (auto coordinator = directory->get(engine::coordinator_path()))
      caf::anon_send(coordinator, writer_down_atom::value, path);
  };
  if (cluster) {
    add_cluster_hooks(spec, cluster);
    // A writer stopped for its move may have held a shard of the save in flight (one
    // already restarted on the right worker after a failure, moved again): that save
    // fails and the next one retries, as for a writer that died.
    spec.on_relocated = [directory](const std::string& path) {
      if (auto coordinator = directory->get(engine::coordinator_path()))
        caf::anon_send(coordinator, writer_down_atom::value, path);
    };
    // A shrink or a grow moves ranks to other workers: their writers follow (an
    // optimizer shard finds its writer in its own process's directory).
    cluster->on_move([directory, ranks = engine::Topology::logical(c).all_ranks()](const std::vector<int32_t>& moved) {
      const auto writers = directory->get(engine::writers_supervisor_path());
      if (!writers) return;
      for (const int32_t i : moved)
        caf::anon_send(writers, relocate_atom::value, engine::writer_path(ranks[size_t(i)]),
                       std::string("its rank moved to another worker (a shrink or a grow)"));
    });
  }
  return spec;
}

}  // namespace troupe::actors
