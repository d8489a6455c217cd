#include "actors/cluster/worker_host.h"

#include <mutex>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/cluster/cluster.h"
#include "actors/cluster/cluster_protocol.h"
#include "actors/directory.h"
#include "actors/loader_actor.h"
#include "actors/message_types.h"
#include "actors/optimizer_actor.h"
#include "actors/stage_actor.h"
#include "actors/writer_actor.h"
#include "ckpt/reader.h"
#include "comm/gloo_groups.h"
#include "engine/cluster_device_groups.h"
#include "engine/rank_device.h"

namespace troupe::actors {
namespace {

// The communicators of one generation on this worker: each stage connects its own
// rank's groups (blocking, on its thread): Gloo groups on the CPU, NCCL groups on the
// rank's device with the supervisor's IDs on GPUs (engine/cluster_device_groups.h).
// abort() fails all of them, also those connected after it.
class GenerationComms {
 public:
  GenerationComms(int64_t generation, const Config& c, std::shared_ptr<comm::Store> store, std::string prefix,
                  comm::GlooOptions options)
      : generation_(generation),
        config_(c),
        topo_(engine::Topology::of(c)),
        store_(std::move(store)),
        prefix_(std::move(prefix)),
        options_(options) {}

  int64_t generation() const { return generation_; }

  engine::RankComms connect(int32_t index, const std::shared_ptr<kernels::Device>& device) {
    {
      std::lock_guard lock(mu_);
      if (!why_.empty()) throw comm::CommError(fmt::format("generation {} was abandoned: {}", generation_, why_));
    }
    engine::RankComms r;
    if (config_.device().type() == DeviceConfig::CPU) {
      const auto g = comm::connect_rank_comms(topo_.dp, topo_.pp, topo_.tp, index, *store_, prefix_, options_);
      r.data_parallel = g.data_parallel;
      r.tensor_parallel = g.tensor_parallel;
      r.embedding = g.embedding;
      r.pipeline_prev = g.pipeline_prev;
      r.pipeline_next = g.pipeline_next;
    } else {
      r = engine::join_device_groups(config_, index, *store_, prefix_, device, options_.timeout);
    }
    const std::shared_ptr<comm::Communicator> joined[] = {r.data_parallel, r.tensor_parallel, r.embedding,
                                                          r.pipeline_prev, r.pipeline_next};
    if (config_.device().type() != DeviceConfig::CPU) {
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

  void abort(const std::string& why) {
    std::lock_guard lock(mu_);
    if (why_.empty()) why_ = why.empty() ? "aborted" : why;
    for (const auto& c : all_) c->abort(why_);
  }

 private:
  const int64_t generation_;
  const Config config_;
  const engine::Topology topo_;
  std::shared_ptr<comm::Store> store_;
  const std::string prefix_;
  const comm::GlooOptions options_;
  std::mutex mu_;
  std::string why_;
  std::vector<std::shared_ptr<comm::Communicator>> all_;
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

std::shared_ptr<GenerationComms> generation(Self* self, int64_t g) {
  auto& st = self->state;
  if (!st.comms || st.comms->generation() != g) {
    if (st.comms) st.comms->abort(fmt::format("superseded by generation {}", g));
    const auto& a = *st.args;
    st.comms = std::make_shared<GenerationComms>(g, a.config, a.store,
                                                 generation_prefix(a.run_id, g), a.gloo);
  }
  return st.comms;
}

caf::actor place(Self* self, const PlaceActor& p) {
  auto& st = self->state;
  const auto& a = *st.args;
  const auto& c = a.config;
  a.faults->mark_fired(p.fired);
  const engine::Rank r{p.dp, p.pp, p.tp};
  const auto topo = engine::Topology::of(c);
  if (p.dp < 0 || p.dp >= topo.dp || p.pp < 0 || p.pp >= topo.pp || p.tp < 0 || p.tp >= topo.tp)
    throw std::invalid_argument(fmt::format("rank (dp {}, pp {}, tp {}) is outside the layout", p.dp, p.pp, p.tp));
  caf::actor placed;
  if (!st.devices) st.devices = std::make_shared<engine::RankDevices>(c);
  if (p.kind == "stage") {
    const auto device = st.devices->get(r, p.incarnation);
    StageArgs s{c, r, {}, a.faults, checkpoint(self, p.resume_dir), {}, device};
    s.connect_comms = [comms = generation(self, p.generation), index = topo.index(r), device] {
      return comms->connect(index, device);
    };
    placed = untyped_handle(spawn_stage(self, std::move(s)));
  } else if (p.kind == "optim") {
    placed = untyped_handle(spawn_optimizer(self, OptimizerArgs{c, r, a.faults, checkpoint(self, p.resume_dir),
                                                                st.directory, st.devices->get(r, p.incarnation)}));
  } else if (p.kind == "writer") {
    placed = untyped_handle(spawn_writer(self, WriterArgs{c, r, a.faults, st.directory}));
    st.directory->put(engine::writer_path(r), placed);
  } else if (p.kind == "loader") {
    placed = untyped_handle(spawn_loader(self, LoaderArgs{c, p.dp, a.faults}));
  } else {
    throw std::invalid_argument(fmt::format("unknown actor kind '{}'", p.kind));
  }
  st.hosted.push_back(placed.address());
  spdlog::info("{}: hosting {}", st.name,
               p.kind == "loader" ? engine::loader_path(p.dp) : fmt::format("{}/dp{}/pp{}/tp{}", p.kind, p.dp, p.pp, p.tp));
  return placed;
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
        try {
          return place(self, p);
        } catch (const std::exception& e) {
          spdlog::error("{}: cannot place {} for rank (dp {}, pp {}, tp {}): {}", self->state.name, p.kind, p.dp, p.pp,
                        p.tp, e.what());
          return caf::make_error(caf::sec::runtime_error, std::string(e.what()));
        }
      },
      [self](const AbortComms& a) {
        auto& st = self->state;
        if (st.comms && st.comms->generation() <= a.generation) st.comms->abort(a.why);
        st.args->faults->release_hangs();
      },
      [self](const PeerHandles& h) { self->state.directory->put(engine::coordinator_path(), h.coordinator); },
      [self](const LeaveRun& l) {
        spdlog::info("{}: the supervisor ends the run ({})", self->state.name, l.why);
        stop_hosted(self, "the run is over");
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
        self->set_default_handler(caf::print_and_drop);
        self->become(configured(self));
      },
  };
}

}  // namespace

caf::actor spawn_worker_host(caf::actor_system& sys) { return sys.spawn(host_impl); }

}  // namespace troupe::actors
