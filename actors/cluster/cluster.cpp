#include "actors/cluster/cluster.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/unix_time.h"
#include "engine/cluster_device_groups.h"
#include "engine/state_mirror.h"

namespace troupe::actors {
namespace {

std::string rank_list(const std::vector<int32_t>& ranks) {
  std::string out;
  for (int32_t r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

}  // namespace

const char* to_string(WorkerRecord::Role r) {
  switch (r) {
    case WorkerRecord::Role::Spare: return "spare";
    case WorkerRecord::Role::Active: return "active";
    case WorkerRecord::Role::Quarantined: return "quarantined";
  }
  return "?";
}

std::string Cluster::describe(const WorkerRecord& w) {
  return fmt::format("worker {} ({}, pid {})", w.id, w.host, w.pid);
}

Cluster::Cluster(const Config& c, const engine::Topology& placed)
    : config_(c),
      topo_(placed),
      placement_(engine::placement_of(c, placed)),
      expected_spares_(c.cluster().spares()),
      position_worker_(size_t(placement_.workers()), -1),
      configured_physical_(placed.physical_replicas()) {}

engine::Topology Cluster::placed() const {
  std::lock_guard lock(mu_);
  return topo_;
}

std::optional<std::string> Cluster::refused(const caf::node_id& node) const {
  std::lock_guard lock(mu_);
  for (const auto& w : workers_)
    if (w.node == node && w.role == WorkerRecord::Role::Quarantined)
      return fmt::format("this process was {} and is quarantined for the rest of the run", describe(w));
  return std::nullopt;
}

int32_t Cluster::fits_position(int32_t slots) const {
  for (size_t p = 0; p < position_worker_.size(); ++p)
    if (position_worker_[p] < 0 && int32_t(placement_.ranks_of[p].size()) <= slots) return int32_t(p);
  return -1;
}

WorkerRecord Cluster::join(WorkerRecord w) {
  std::lock_guard lock(mu_);
  w.id = int32_t(workers_.size()) + 1;
  w.joined_at = unix_now();
  w.role = WorkerRecord::Role::Spare;
  w.position = -1;
  // Before the run is exhausted, a newcomer fills a vacant active worker; once a
  // position went vacant without a spare the run is stopping and nobody is placed.
  if (!exhausted_) {
    const int32_t p = fits_position(w.slots);
    if (p >= 0) {
      w.role = WorkerRecord::Role::Active;
      w.position = p;
      position_worker_[size_t(p)] = int32_t(workers_.size());
    }
  }
  workers_.push_back(w);
  if (w.role == WorkerRecord::Role::Active)
    spdlog::info("cluster: {} joined with {} slot(s): active worker {} (ranks {})", describe(w), w.slots, w.position,
                 rank_list(placement_.ranks_of[size_t(w.position)]));
  else
    spdlog::info("cluster: {} joined with {} slot(s): hot spare", describe(w), w.slots);
  cv_.notify_all();
  return w;
}

std::string Cluster::wait_until_ready(std::chrono::milliseconds timeout, const std::function<bool()>& interrupted) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::unique_lock lock(mu_);
  auto vacant = [&] {
    int32_t n = 0;
    for (int32_t w : position_worker_) n += w < 0;
    return n;
  };
  auto spares = [&] {
    int32_t n = 0;
    for (const auto& w : workers_) n += w.role == WorkerRecord::Role::Spare;
    return n;
  };
  while (vacant() > 0 || spares() < expected_spares_) {
    if (std::chrono::steady_clock::now() >= deadline || (interrupted && interrupted())) break;
    cv_.wait_for(lock, std::chrono::milliseconds(100));
  }
  if (vacant() > 0)
    return fmt::format("{} of {} active worker(s) have a process ({} joined in all, {} quarantined)",
                       placement_.workers() - vacant(), placement_.workers(), workers_.size(), quarantine_.size());
  if (spares() < expected_spares_)
    spdlog::warn("cluster: starting with {} of {} spare(s); later spares still join", spares(), expected_spares_);
  return "";
}

std::optional<WorkerRecord> Cluster::host_of_rank(int32_t index) const {
  std::lock_guard lock(mu_);
  if (index < 0 || size_t(index) >= placement_.worker_of.size()) return std::nullopt;
  const int32_t w = position_worker_[size_t(placement_.worker_of[size_t(index)])];
  if (w < 0) return std::nullopt;
  return workers_[size_t(w)];
}

std::optional<WorkerRecord> Cluster::host_of_loader(int32_t dp) const {
  return host_of_rank(topo_.index({dp, 0, 0}));
}

void Cluster::lost(const caf::node_id& node, const std::string& error) {
  std::lock_guard lock(mu_);
  for (size_t i = 0; i < workers_.size(); ++i) {
    auto& w = workers_[i];
    if (w.node != node || w.role == WorkerRecord::Role::Quarantined) continue;
    QuarantineRecord q;
    q.worker_id = w.id;
    q.host = w.host;
    q.pid = w.pid;
    q.position = w.position;
    q.unix_time = unix_now();
    q.run_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - created_).count();
    q.error = error;
    const int32_t position = w.role == WorkerRecord::Role::Active ? w.position : -1;
    w.role = WorkerRecord::Role::Quarantined;
    w.position = -1;
    spdlog::error("cluster: {} quarantined for the rest of the run: {}", describe(w), error);
    if (position >= 0) {
      position_worker_[size_t(position)] = -1;
      const auto need = int32_t(placement_.ranks_of[size_t(position)].size());
      for (size_t s = 0; s < workers_.size(); ++s) {
        auto& spare = workers_[s];
        if (spare.role != WorkerRecord::Role::Spare || spare.slots < need) continue;
        spare.role = WorkerRecord::Role::Active;
        spare.position = position;
        position_worker_[size_t(position)] = int32_t(s);
        q.replaced_by = spare.id;
        spdlog::warn("cluster: {} takes over active worker {} (ranks {}) from worker {}", describe(spare), position,
                     rank_list(placement_.ranks_of[size_t(position)]), w.id);
        break;
      }
      if (q.replaced_by < 0 && !exhausted_) {
        const auto lost_ranks = rank_list(placement_.ranks_of[size_t(position)]);
        const auto shrunk = shrink_locked();
        if (const auto* physical = std::get_if<int32_t>(&shrunk)) {
          q.shrunk_to = *physical;
        } else {
          exhausted_ = fmt::format(
              "{} was lost ({}) and no spare with {} slot(s) is left to host its ranks ({}), and the run cannot "
              "shrink: {}; the run stops with its latest checkpoint intact",
              describe(w), error, need, lost_ranks, std::get<std::string>(shrunk));
          spdlog::error("cluster: {}", *exhausted_);
        }
      }
    }
    quarantine_.push_back(std::move(q));
    cv_.notify_all();
    return;
  }
}

// Why the logical layout may not be placed on another number of physical replicas, or
// "" (hosting runs on the CPU with the distributed optimizer; EXPLICIT lists the
// configured workers' ranks).
std::string Cluster::why_fixed_locked() const {
  const auto& k = config_.cluster();
  if (config_.device().type() != DeviceConfig::CPU)
    return "physical replicas hosting several logical ones run on the CPU device only so far";
  if (!config_.parallel().distributed_optimizer())
    return "physical replicas hosting several logical ones need parallel.distributed_optimizer";
  if (k.placement() == ClusterConfig::EXPLICIT) return "cluster.placement EXPLICIT lists the ranks of the configured workers only";
  return "";
}

std::optional<Cluster::Fit> Cluster::fit_locked(int32_t physical) const {
  if (physical < 1 || topo_.dp % physical != 0) return std::nullopt;
  // The live workers, most slots first: the largest blocks of ranks go to them.
  std::vector<size_t> live;
  for (size_t i = 0; i < workers_.size(); ++i)
    if (workers_[i].role != WorkerRecord::Role::Quarantined) live.push_back(i);
  std::stable_sort(live.begin(), live.end(), [&](size_t a, size_t b) { return workers_[a].slots > workers_[b].slots; });
  Fit f;
  f.placed = topo_.placed_on(physical);
  const int32_t active = std::min<int32_t>(int32_t(live.size()), f.placed.physical_layout().ranks());
  if (active < 1) return std::nullopt;
  f.placement = engine::placement_of(config_, f.placed, active);
  std::vector<size_t> positions(static_cast<size_t>(active));
  for (size_t i = 0; i < positions.size(); ++i) positions[i] = i;
  std::stable_sort(positions.begin(), positions.end(), [&](size_t a, size_t b) {
    return f.placement.ranks_of[a].size() > f.placement.ranks_of[b].size();
  });
  for (size_t i = 0; i < positions.size(); ++i) {
    if (int32_t(f.placement.ranks_of[positions[i]].size()) > workers_[live[i]].slots) return std::nullopt;
    f.worker_of_position.push_back({positions[i], live[i]});
  }
  f.live = std::move(live);
  return f;
}

std::string Cluster::apply_locked(const Fit& f) {
  const auto host_worker = [&](size_t index) {  // the worker record hosting logical rank `index`, or -1
    const int32_t position = placement_.worker_of[index];
    return position < 0 ? -1 : position_worker_[size_t(position)];
  };
  std::vector<int32_t> before(placement_.worker_of.size());
  for (size_t i = 0; i < before.size(); ++i) before[i] = host_worker(i);
  topo_ = f.placed;
  placement_ = f.placement;
  position_worker_.assign(size_t(f.placement.workers()), -1);
  // The live workers stand for the new active workers, the others are spares.
  for (const size_t i : f.live) {
    workers_[i].role = WorkerRecord::Role::Spare;
    workers_[i].position = -1;
  }
  std::string on;
  for (const auto& [position, worker] : f.worker_of_position) {
    auto& w = workers_[worker];
    w.role = WorkerRecord::Role::Active;
    w.position = int32_t(position);
    position_worker_[position] = int32_t(worker);
    on += fmt::format("{}{} (ranks {})", on.empty() ? "" : ", ", describe(w), rank_list(f.placement.ranks_of[position]));
  }
  std::vector<int32_t> moved;
  for (size_t i = 0; i < before.size(); ++i)
    if (host_worker(i) != before[i]) moved.push_back(int32_t(i));
  if (on_move_) on_move_(moved);
  return on;
}

std::variant<int32_t, std::string> Cluster::shrink_locked() {
  const auto& k = config_.cluster();
  if (k.on_no_spare() == ClusterConfig::STOP) return std::string("cluster.on_no_spare is STOP");
  if (const auto why = why_fixed_locked(); !why.empty()) return why;
  // The most physical replicas below the current count that divide the logical ones,
  // that the live workers hold, and that are not below the floor.
  for (int32_t physical = topo_.physical_replicas() - 1; physical >= k.min_physical_replicas(); --physical) {
    const auto fit = fit_locked(physical);
    if (!fit) continue;
    const int32_t from = topo_.physical_replicas();
    const auto on = apply_locked(*fit);
    spdlog::warn("cluster: no spare left: the logical layout (data {}) shrinks from {} to {} physical replica(s) "
                 "on {}; the training group restarts on it from the {}, with the same numbers",
                 topo_.dp, from, physical, on,
                 engine::state_mirror_on(config_) ? "state mirror in the survivors' memory or the newest checkpoint, "
                                                    "whichever is newer"
                                                  : "newest checkpoint");
    return physical;
  }
  int32_t live = 0;
  for (const auto& w : workers_) live += w.role != WorkerRecord::Role::Quarantined;
  return fmt::format("no placement on fewer than {} physical replicas (dividing parallel.data = {}, at least "
                     "cluster.min_physical_replicas = {}) fits the {} live worker(s)",
                     topo_.physical_replicas(), topo_.dp, k.min_physical_replicas(), live);
}

std::optional<Cluster::Fit> Cluster::grow_fit_locked() const {
  if (exhausted_ || topo_.physical_replicas() >= configured_physical_ || !why_fixed_locked().empty()) return std::nullopt;
  bool spare = false;
  for (const auto& w : workers_) spare = spare || w.role == WorkerRecord::Role::Spare;
  if (!spare) return std::nullopt;
  for (int32_t physical = configured_physical_; physical > topo_.physical_replicas(); --physical)
    if (auto fit = fit_locked(physical)) return fit;
  return std::nullopt;
}

std::optional<int32_t> Cluster::grow_target() const {
  std::lock_guard lock(mu_);
  const auto fit = grow_fit_locked();
  if (!fit) return std::nullopt;
  return fit->placed.physical_replicas();
}

std::optional<int32_t> Cluster::grow() {
  std::lock_guard lock(mu_);
  const auto fit = grow_fit_locked();
  if (!fit) return std::nullopt;
  const int32_t from = topo_.physical_replicas();
  const auto on = apply_locked(*fit);
  spdlog::warn("cluster: the logical layout (data {}) grows from {} to {} physical replica(s) on {}; the training "
               "group continues on it from the checkpoint of the step it ended at, with the same numbers",
               topo_.dp, from, topo_.physical_replicas(), on);
  return topo_.physical_replicas();
}

void Cluster::on_move(std::function<void(const std::vector<int32_t>&)> f) {
  std::lock_guard lock(mu_);
  on_move_ = std::move(f);
}

std::optional<std::string> Cluster::exhausted() const {
  std::lock_guard lock(mu_);
  return exhausted_;
}

std::vector<caf::actor> Cluster::live_agents() const {
  std::lock_guard lock(mu_);
  std::vector<caf::actor> out;
  for (const auto& w : workers_)
    if (w.role != WorkerRecord::Role::Quarantined) out.push_back(w.agent);
  return out;
}

caf::actor Cluster::live_agent(int32_t worker_id) const {
  std::lock_guard lock(mu_);
  for (const auto& w : workers_)
    if (w.id == worker_id && w.role != WorkerRecord::Role::Quarantined) return w.agent;
  return {};
}

std::vector<Cluster::Buddy> Cluster::mirror_buddies() const {
  std::lock_guard lock(mu_);
  std::vector<const WorkerRecord*> active;
  for (const int32_t i : position_worker_)
    if (i >= 0 && workers_[size_t(i)].role == WorkerRecord::Role::Active) active.push_back(&workers_[size_t(i)]);
  std::vector<Buddy> out;
  for (size_t k = 0; k < active.size(); ++k) {
    const auto* next = active[(k + 1) % active.size()];
    out.push_back({active[k]->agent, next == active[k] ? MirrorBuddy{} : MirrorBuddy{next->id, next->agent}});
  }
  return out;
}

std::vector<WorkerRecord> Cluster::workers() const {
  std::lock_guard lock(mu_);
  return workers_;
}

std::vector<QuarantineRecord> Cluster::quarantine() const {
  std::lock_guard lock(mu_);
  return quarantine_;
}

std::string generation_prefix(const std::string& run_id, int64_t generation) {
  return fmt::format("{}/gen{}", run_id, generation);
}

ClusterComms::ClusterComms(std::shared_ptr<Cluster> cluster, caf::actor store, std::string run_id, const Config& c)
    : cluster_(std::move(cluster)),
      store_(std::move(store)),
      run_id_(std::move(run_id)),
      config_(c) {}

int64_t ClusterComms::current() {
  std::lock_guard lock(mu_);
  if (aborted_) {
    ++generation_;
    aborted_ = false;
    // On GPUs every group is an NCCL group. Before any rank of the generation is
    // placed; a member that asks first waits in the store for its ID.
    if (config_.device().type() != DeviceConfig::CPU)
      for (auto& [key, id] : engine::mint_device_group_ids(config_, generation_prefix(run_id_, generation_)))
        caf::anon_send(store_, StoreSet{std::move(key), std::vector<char>(id.begin(), id.end())});
  }
  return generation_;
}

void ClusterComms::abort(const std::string& why) {
  std::lock_guard lock(mu_);
  if (aborted_) return;
  aborted_ = true;
  caf::anon_send(store_, StoreAbort{generation_prefix(run_id_, generation_) + "/", why});
  for (const auto& agent : cluster_->live_agents()) caf::anon_send(agent, AbortComms{generation_, why});
}

namespace {

// Exits at once with `why`: what a supervisor gets when a child could not be placed.
caf::actor stand_in(caf::event_based_actor* self, const std::string& why) {
  auto a = self->spawn([](caf::event_based_actor*) -> caf::behavior {
    return {[](int32_t) {}};
  });
  self->send_exit(a, caf::make_error(caf::sec::runtime_error, why));
  return a;
}

}  // namespace

caf::actor place_on_worker(caf::event_based_actor* self, Cluster& cluster, PlaceActor request,
                           std::chrono::milliseconds timeout) {
  const bool loader = request.kind == "loader";
  const engine::Rank& rank = request.rank;
  const auto what = loader ? engine::loader_path(rank.dp) : engine::rank_path(request.kind, rank);
  const auto host = loader ? cluster.host_of_loader(rank.dp) : cluster.host_of_rank(cluster.index_of(rank));
  if (!host) {
    const auto why = cluster.exhausted().value_or("no worker hosts it");
    return stand_in(self, fmt::format("{} cannot be placed: {}", what, why));
  }
  caf::actor placed;
  std::string error;
  {
    caf::scoped_actor blocking{self->system()};
    blocking->request(host->agent, timeout, std::move(request))
        .receive([&](caf::actor& a) { placed = std::move(a); },
                 [&](caf::error& e) { error = self->system().render(e); });
  }
  if (!placed)
    return stand_in(self, fmt::format("placing {} on {} failed: {}", what, Cluster::describe(*host),
                                      error.empty() ? "no actor in the answer" : error));
  return placed;
}

}  // namespace troupe::actors
