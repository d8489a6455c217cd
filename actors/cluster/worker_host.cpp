#include "actors/cluster/worker_host.h"

#include <future>
#include <map>
#include <mutex>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/cluster/cluster.h"
#include "actors/cluster/cluster_protocol.h"
#include "actors/directory.h"
#include "actors/loader_actor.h"
#include "actors/message_types.h"
#include "actors/mirror_keeper.h"
#include "actors/optimizer_actor.h"
#include "actors/stage_actor.h"
#include "actors/writer_actor.h"
#include "ckpt/reader.h"
#include "comm/gloo_groups.h"
#include "comm/ordered_reduction.h"
#include "engine/checkpointing.h"
#include "engine/cluster_device_groups.h"
#include "engine/hosted_stage.h"
#include "engine/rank_device.h"
#include "engine/stage_worker.h"
#include "engine/state_mirror.h"
#include "sched/schedule_verifier.h"

namespace troupe::actors {
namespace {

// The communicators of one generation on this worker: each stage connects its own
// rank's groups (blocking, on its thread): Gloo groups on the CPU, NCCL groups on the
// rank's device with the supervisor's IDs on GPUs (engine/cluster_device_groups.h).
// With physical replicas hosting several logical ones (docs/layout.md) the groups are
// the physical layout's: the first of a physical rank's hosted stages to start connects
// its host rank's and makes them hosting (engine/hosted_stage.h), the others wait for
// and share them. abort() fails all of them, also those connected after it.
class GenerationComms {
 public:
  // `placed`: the training group's logical layout on its placement (PlaceActor), the
  // same for every actor of one generation.
  GenerationComms(int64_t generation, std::shared_ptr<const Config> c, const engine::Topology& placed,
                  std::shared_ptr<comm::Store> store, std::string prefix, comm::GlooOptions options)
      : generation_(generation),
        config_(std::move(c)),
        topo_(placed),
        store_(std::move(store)),
        prefix_(std::move(prefix)),
        options_(options) {}

  int64_t generation() const { return generation_; }
  const engine::Topology& placed() const { return topo_; }

  // `hosted`: what the physical rank's hosted ranks share on this worker (null unless
  // Topology::hosts_several).
  engine::RankComms connect(const engine::Rank& rank, const std::shared_ptr<kernels::Device>& device,
                            const std::shared_ptr<engine::HostedStage>& hosted) {
    if (!topo_.hosts_several()) return connect_rank(topo_, topo_.index(rank), device);
    const engine::Rank host = topo_.host_of(rank);
    std::shared_future<engine::RankComms> ready;
    std::promise<engine::RankComms> mine;
    {
      std::lock_guard lock(mu_);
      auto [at, first] = hosts_.try_emplace(topo_.index(host));
      if (first) at->second = mine.get_future().share();
      else ready = at->second;
    }
    if (ready.valid()) return ready.get();
    try {
      auto r = connect_rank(topo_.physical_layout(), topo_.index(host), device);
      engine::add_hosting(r, *config_, host, options_.timeout);
      r.hosted = hosted;
      {
        std::lock_guard lock(mu_);
        reductions_.push_back(r.ordered_reduction);
        if (!why_.empty()) r.ordered_reduction->abort(why_);
      }
      mine.set_value(r);
      return r;
    } catch (...) {
      mine.set_exception(std::current_exception());
      throw;
    }
  }

  void abort(const std::string& why) {
    std::lock_guard lock(mu_);
    if (why_.empty()) why_ = why.empty() ? "aborted" : why;
    for (const auto& c : all_) c->abort(why_);
    for (const auto& r : reductions_) r->abort(why_);
  }

 private:
  // Rank `index`'s groups of `layout` (the logical one, or the physical one for a host rank).
  engine::RankComms connect_rank(const engine::Topology& layout, int32_t index,
                                 const std::shared_ptr<kernels::Device>& device) {
    {
      std::lock_guard lock(mu_);
      if (!why_.empty()) throw comm::CommError(fmt::format("generation {} was abandoned: {}", generation_, why_));
    }
    engine::RankComms r;
    if (config_->device().type() == DeviceConfig::CPU) {
      const auto g = comm::connect_rank_comms(layout.dp, layout.pp, layout.tp, index, *store_, prefix_, options_);
      r.data_parallel = g.data_parallel;
      r.tensor_parallel = g.tensor_parallel;
      r.embedding = g.embedding;
      r.pipeline_prev = g.pipeline_prev;
      r.pipeline_next = g.pipeline_next;
    } else {
      r = engine::join_device_groups(*config_, index, *store_, prefix_, device, options_.timeout);
    }
    const std::shared_ptr<comm::Communicator> joined[] = {r.data_parallel, r.tensor_parallel, r.embedding,
                                                          r.pipeline_prev, r.pipeline_next};
    if (config_->device().type() != DeviceConfig::CPU) {
      std::string names;
      for (const auto& c : joined)
        if (c) names += (names.empty() ? "" : ", ") + c->name();
      spdlog::info("rank {}: joined its NCCL groups of generation {}: {}", index, generation_, names);
    }
    std::lock_guard lock(mu_);
    if (!why_.empty()) {
      for (const auto& c : joined)
        if (c) c->abort(why_);
      throw comm::CommError(fmt::format("generation {} was abandoned while connecting: {}", generation_, why_));
    }
    for (const auto& c : joined)
      if (c) all_.push_back(c);
    return r;
  }

  const int64_t generation_;
  const std::shared_ptr<const Config> config_;  // the worker's one Config
  const engine::Topology topo_;
  std::shared_ptr<comm::Store> store_;
  const std::string prefix_;
  const comm::GlooOptions options_;
  std::mutex mu_;
  std::string why_;
  std::vector<std::shared_ptr<comm::Communicator>> all_;
  std::map<int32_t, std::shared_future<engine::RankComms>> hosts_;  // by host rank index
  std::vector<std::shared_ptr<comm::OrderedReduction>> reductions_;
};

struct HostState {
  std::shared_ptr<const WorkerHostArgs> args;
  std::string name = "worker";
  std::shared_ptr<Directory> directory = std::make_shared<Directory>();
  std::shared_ptr<GenerationComms> comms;
  // A rank's stage and optimizer shard placed here by the same start of the training
  // group share one device, as in the in-process runtime (engine/rank_device.h).
  std::shared_ptr<engine::RankDevices> devices;
  std::string ckpt_dir;
  std::shared_ptr<const ckpt::Checkpoint> ckpt;
  std::vector<caf::actor_addr> hosted;
  // With physical replicas hosting several logical ones: what the stages and optimizer
  // shards of one start (incarnation) of a physical rank share, by (host index, incarnation).
  std::map<std::pair<int32_t, int>, std::weak_ptr<engine::HostedStage>> hosted_stages;
  // What the pieces of the Config the hosted actors receive share, made once: the
  // loaders' and optimizer shards' pieces, the stages' verified schedule.
  std::shared_ptr<const LoaderConfig> loader_config;
  std::shared_ptr<const OptimizerConfig> optimizer_config;
  std::shared_ptr<const sched::PipelineSchedule> schedule;
  // The state mirror (supervision.state_mirror, engine/state_mirror.h): this worker's
  // keeper and what it holds, for the whole run (every start of the training group).
  std::shared_ptr<engine::MirrorStore> mirror_store;
  mirror_keeper_actor keeper;
};

using Self = caf::stateful_actor<HostState>;

std::shared_ptr<const ckpt::Checkpoint> checkpoint(Self* self, const std::string& dir) {
  auto& st = self->state;
  if (dir.empty()) return nullptr;
  if (dir != st.ckpt_dir || !st.ckpt) {
    st.ckpt = std::make_shared<const ckpt::Checkpoint>(ckpt::Checkpoint::open(dir));
    st.ckpt_dir = dir;
  }
  return st.ckpt;
}

std::shared_ptr<GenerationComms> generation(Self* self, int64_t g, const engine::Topology& placed) {
  auto& st = self->state;
  if (!st.comms || st.comms->generation() != g) {
    if (st.comms) st.comms->abort(fmt::format("superseded by generation {}", g));
    const auto& a = *st.args;
    st.comms = std::make_shared<GenerationComms>(g, std::shared_ptr<const Config>(st.args, &a.config), placed, a.store,
                                                 generation_prefix(a.run_id, g), a.gloo);
  } else if (st.comms->placed().physical_replicas() != placed.physical_replicas()) {
    throw std::invalid_argument(fmt::format("generation {} placed on {} physical replicas, now asked for {}", g,
                                            st.comms->placed().physical_replicas(), placed.physical_replicas()));
  }
  return st.comms;
}

// The rank devices of the training group's placement: made again when a start of the
// group comes with another placement (a device is per physical rank).
engine::RankDevices& devices(Self* self, const engine::Topology& placed) {
  auto& st = self->state;
  if (!st.devices || st.devices->placed().physical_replicas() != placed.physical_replicas())
    st.devices = std::make_shared<engine::RankDevices>(std::shared_ptr<const Config>(st.args, &st.args->config), placed);
  return *st.devices;
}

// The HostedStage rank r's physical rank shares with its other hosted ranks of the same
// start, as RankDevices hands out devices; null when physical replicas host one each.
std::shared_ptr<engine::HostedStage> hosted_stage(Self* self, const engine::Topology& topo, const engine::Rank& r,
                                                  int incarnation) {
  if (!topo.hosts_several()) return nullptr;
  auto& slot = self->state.hosted_stages[{topo.index(topo.host_of(r)), incarnation}];
  auto h = slot.lock();
  if (!h) slot = h = std::make_shared<engine::HostedStage>();
  return h;
}

// `resume`: the checkpoint a stage or optimizer shard starts from (PlaceActor::resume_dir
// opened, or the state mirror's shards fetched: place_from_mirror).
caf::actor place(Self* self, const PlaceActor& p, std::shared_ptr<const ckpt::Checkpoint> resume) {
  auto& st = self->state;
  const auto& a = *st.args;
  // The worker's one Config (received when it joined): each hosted actor gets its piece.
  const Config& c = a.config;
  a.faults->mark_fired(p.fired);
  const engine::Rank& r = p.rank;
  // The group's logical layout on the placement its start runs on.
  const auto topo = engine::Topology::logical(c).placed_on(p.physical_replicas);
  if (!topo.contains(r))
    throw std::invalid_argument(fmt::format("rank {} is outside the layout", engine::rank_text(r)));
  if (topo.dp % topo.physical_replicas() != 0)
    throw std::invalid_argument(fmt::format("{} physical replicas do not divide the {} logical ones",
                                            topo.physical_replicas(), topo.dp));
  caf::actor placed;
  if (p.kind == "stage") {
    const auto device = devices(self, topo).get(r, p.incarnation);
    if (!st.schedule)
      st.schedule = std::make_shared<const sched::PipelineSchedule>(sched::verified_pipeline_schedule(c));
    StageArgs s{std::make_shared<const engine::StageSpec>(engine::StageSpec::of(c, r, st.schedule)), r, topo, {},
                a.faults, resume, {}, device};
    s.connect_comms = [comms = generation(self, p.generation, topo), r, device,
                       hosted = hosted_stage(self, topo, r, p.incarnation)] { return comms->connect(r, device, hosted); };
    placed = untyped_handle(spawn_stage(self, std::move(s)));
  } else if (p.kind == "optim") {
    // A hosted rank's shard takes its physical rank's device turn (engine/hosted_stage.h).
    if (!st.optimizer_config) st.optimizer_config = OptimizerConfig::of(c);
    auto registry = std::make_shared<const model::ParameterRegistry>(engine::stage_registry(c, r));
    placed = untyped_handle(spawn_optimizer(
        self, OptimizerArgs{st.optimizer_config, std::move(registry), r, a.faults, resume, st.directory,
                            devices(self, topo).get(r, p.incarnation), hosted_stage(self, topo, r, p.incarnation),
                            // Cluster mode has one mirror timeline (no rollback there).
                            st.keeper ? std::optional<int64_t>(0) : std::nullopt}));
  } else if (p.kind == "writer") {
    // No copies kept in memory on a worker (engine/shard_copies.h: one process only).
    auto layout = std::make_shared<const ckpt::FlatLayout>(engine::shard_layout(c, r));
    placed = untyped_handle(spawn_writer(self, WriterArgs{std::move(layout), r, a.faults, st.directory, nullptr}));
    st.directory->put(engine::writer_path(r), placed);
  } else if (p.kind == "loader") {
    if (!st.loader_config) st.loader_config = LoaderConfig::of(c);
    placed = untyped_handle(spawn_loader(self, LoaderArgs{st.loader_config, r.dp, a.faults, p.skip_samples}));
  } else {
    throw std::invalid_argument(fmt::format("unknown actor kind '{}'", p.kind));
  }
  st.hosted.push_back(placed.address());
  spdlog::info("{}: hosting {}", st.name,
               p.kind == "loader" ? engine::loader_path(r.dp) : engine::rank_path(p.kind, r));
  return placed;
}

// A stage or optimizer shard of a start from the state mirror: the shards of its
// pipeline stage and tensor-parallel slice (every data-parallel rank's, which together
// hold the stage's parameters) are taken from this worker's keeper or fetched from the
// live workers that hold them, opened as a checkpoint in memory (verified: size, CRC-32C,
// piece table) and the actor placed from it. Answers through `rp`.
void place_from_mirror(Self* self, PlaceActor p, caf::typed_response_promise<caf::actor> rp) {
  auto& st = self->state;
  CheckpointManifest whole;
  if (!whole.ParseFromString(p.mirror_manifest)) {
    rp.deliver(caf::make_error(caf::sec::runtime_error, std::string("the state mirror's manifest does not parse")));
    return;
  }
  // The manifest of the shards this rank reads: the checkpoint in memory is verified whole.
  CheckpointManifest needed = whole;
  needed.clear_shard();
  struct Fetch {
    std::map<std::string, std::shared_ptr<const std::string>> bytes;
    size_t left = 0;
    bool failed = false;
  };
  auto fetch = std::make_shared<Fetch>();
  std::map<std::string, const ShardFile*> by_file;
  for (const auto& shard : whole.shard()) by_file[shard.file()] = &shard;
  std::vector<std::pair<std::string, caf::actor>> remote;
  for (size_t i = 0; i < p.mirror_ranks.size() && i < p.mirror_hosts.size(); ++i) {
    const auto& r = p.mirror_ranks[i];
    if (r.pp != p.rank.pp || r.tp != p.rank.tp) continue;
    const auto file = engine::shard_file_name(r);
    if (const auto it = by_file.find(file); it != by_file.end()) *needed.add_shard() = *it->second;
    if (auto held = st.mirror_store ? st.mirror_store->find(p.mirror_step, file) : nullptr)
      fetch->bytes[file] = std::move(held);
    else
      remote.emplace_back(file, p.mirror_hosts[i]);
  }
  auto finish = [self, p, needed, fetch, rp]() mutable {
    std::shared_ptr<const ckpt::Checkpoint> ck;
    try {
      ck = std::make_shared<const ckpt::Checkpoint>(
          ckpt::Checkpoint::from_memory(engine::mirror_label(p.mirror_step), needed, fetch->bytes));
      rp.deliver(place(self, p, ck));
    } catch (const std::exception& e) {
      spdlog::error("{}: cannot place {} for rank {} from the state mirror: {}", self->state.name, p.kind,
                    engine::rank_text(p.rank), e.what());
      rp.deliver(caf::make_error(caf::sec::runtime_error, std::string(e.what())));
    }
  };
  fetch->left = remote.size();
  if (remote.empty()) return finish();
  for (const auto& [file, host] : remote) {
    if (!host) {
      fetch->failed = true;
      rp.deliver(caf::make_error(caf::sec::runtime_error, "the worker holding " + file + " is gone"));
      return;
    }
    self->request(host, std::chrono::seconds(60), MirrorFetch{p.mirror_step, file})
        .then(
            [fetch, file = file, finish](std::string& bytes) mutable {
              if (fetch->failed) return;
              fetch->bytes[file] = std::make_shared<const std::string>(std::move(bytes));
              if (--fetch->left == 0) finish();
            },
            [self, fetch, file = file, rp](caf::error& e) mutable {
              if (std::exchange(fetch->failed, true)) return;
              rp.deliver(caf::make_error(caf::sec::runtime_error, "fetching " + file + " of the state mirror: " +
                                                                      self->system().render(e)));
            });
  }
}

// Ends every actor still hosted here (communicators first, so none waits in a collective).
void stop_hosted(Self* self, const std::string& why) {
  auto& st = self->state;
  if (st.comms) st.comms->abort(why);
  if (st.args) st.args->faults->release_hangs();
  for (const auto& addr : st.hosted)
    if (auto a = caf::actor_cast<caf::actor>(addr)) self->send_exit(a, caf::exit_reason::kill);
  st.hosted.clear();
}

caf::behavior configured(Self* self) {
  return {
      [self](const PlaceActor& p) -> caf::result<caf::actor> {
        if (p.mirror_step >= 0 && (p.kind == "stage" || p.kind == "optim")) {
          auto rp = self->make_response_promise<caf::actor>();
          place_from_mirror(self, p, rp);
          return rp;
        }
        try {
          return place(self, p, checkpoint(self, p.resume_dir));
        } catch (const std::exception& e) {
          spdlog::error("{}: cannot place {} for rank {}: {}", self->state.name, p.kind, engine::rank_text(p.rank),
                        e.what());
          return caf::make_error(caf::sec::runtime_error, std::string(e.what()));
        }
      },
      [self](const AbortComms& a) {
        auto& st = self->state;
        if (st.comms && st.comms->generation() <= a.generation) st.comms->abort(a.why);
        st.args->faults->release_hangs();
      },
      [self](const PeerHandles& h) { self->state.directory->put(engine::coordinator_path(), h.coordinator); },
      // The state mirror, to this worker's keeper.
      [self](const MirrorBuddy& b) {
        if (self->state.keeper) self->send(self->state.keeper, b);
      },
      [self](MirrorCopy& c) -> caf::result<mirror_held_atom> {
        if (!self->state.keeper) return caf::make_error(caf::sec::runtime_error, std::string("no state mirror here"));
        return self->delegate(self->state.keeper, std::move(c));
      },
      [self](MirrorFetch& f) -> caf::result<std::string> {
        if (!self->state.keeper) return caf::make_error(caf::sec::runtime_error, std::string("no state mirror here"));
        return self->delegate(self->state.keeper, std::move(f));
      },
      [self](const LeaveRun& l) {
        spdlog::info("{}: the supervisor ends the run ({})", self->state.name, l.why);
        stop_hosted(self, "the run is over");
        if (self->state.keeper) self->send_exit(self->state.keeper, caf::exit_reason::kill);
        self->quit();
      },
  };
}

caf::behavior host_impl(Self* self) {
  // Everything but ConfigureHost waits in the mailbox until the worker has joined.
  self->set_default_handler(caf::skip);
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& st = self->state;
    if (!st.args || dm.source != st.args->registrar.address()) return;
    spdlog::error("{}: lost the supervisor ({})", st.name, self->system().render(dm.reason));
    stop_hosted(self, "lost the supervisor");
    self->quit(caf::make_error(caf::sec::runtime_error, std::string("lost the supervisor")));
  });
  return {
      [self](const ConfigureHost& c) {
        auto& st = self->state;
        st.args = c.args;
        st.name = fmt::format("worker {}", st.args->worker_id);
        self->monitor(st.args->registrar);
        if (engine::state_mirror_on(st.args->config)) {
          // Linked: it ends with this host, whatever ends it.
          st.mirror_store = std::make_shared<engine::MirrorStore>();
          MirrorKeeperArgs k{[args = st.args](const engine::Rank& r) { return engine::shard_layout(args->config, r); },
                             st.mirror_store, st.directory, st.args->worker_id};
          st.keeper = spawn_mirror_keeper(self, std::move(k));
          self->link_to(st.keeper);
          st.directory->put(engine::mirror_keeper_path(), untyped_handle(st.keeper));
        }
        self->set_default_handler(caf::print_and_drop);
        self->become(configured(self));
      },
  };
}

}  // namespace

caf::actor spawn_worker_host(caf::actor_system& sys) { return sys.spawn(host_impl); }

}  // namespace troupe::actors
