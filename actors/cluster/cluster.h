// The supervisor's view of a cluster run (docs/cluster.md): the worker processes
// that joined, which of them stands for which active worker of the placement
// (engine/placement.h), the hot spares, and the quarantine. Thread-safe: the
// registrar (joins), the supervisors (placing children, lost nodes) and the run's
// main thread (waiting for workers, the report) all use it.
//
// A lost worker (its connection dropped: SIGKILL, a crash, or no heartbeat for
// cluster.connection_timeout_s) is quarantined for the rest of the run, with the time
// and the error, and is never given ranks again; each active worker it stood for
// passes to a spare with enough slots. With no such spare the logical layout is placed
// again on fewer physical data-parallel replicas over the workers still alive
// (cluster.on_no_spare SHRINK): the training group's next start derives its wiring from
// the new placement (placed()) and resumes from the newest checkpoint, computing the
// same numbers. When no smaller placement fits (or STOP) the cluster is exhausted: the
// supervisors stop instead of restarting (veto), and the run ends with its report and
// its checkpoints intact.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <caf/all.hpp>

#include "actors/cluster/cluster_protocol.h"
#include "engine/placement.h"
#include "engine/topology.h"
#include "messages/config.pb.h"

namespace troupe::actors {

struct WorkerRecord {
  enum class Role : uint8_t { Spare, Active, Quarantined };
  int32_t id = 0;         // in joining order, from 1
  std::string host;       // host name it reported
  std::string gloo_host;  // where its communicators listen
  int64_t pid = 0;
  int32_t slots = 0;
  caf::actor agent;  // its host actor
  caf::node_id node;
  Role role = Role::Spare;
  int32_t position = -1;  // the placement's active worker it stands for (Active)
  double joined_at = 0;   // unix seconds
};
const char* to_string(WorkerRecord::Role r);

struct QuarantineRecord {
  int32_t worker_id = 0;
  std::string host;
  int64_t pid = 0;
  int32_t position = -1;  // the active worker it stood for; -1 for a spare
  double unix_time = 0;
  double run_seconds = 0;  // since the cluster was created
  std::string error;
  int32_t replaced_by = -1;  // the spare that took over (worker id), -1 when none
  int32_t shrunk_to = -1;    // without a spare: the physical replicas the run went on with, -1 when none
};

class Cluster {
 public:
  // `placed`: the logical layout on the placement the run starts on (engine::RunState).
  Cluster(const Config& c, const engine::Topology& placed);

  // The logical layout on the current placement (changed by a shrink; read at each
  // start of the training group).
  engine::Topology placed() const;
  int32_t index_of(const engine::Rank& r) const { return topo_.index(r); }

  // Why a process may not join (it was quarantined), or nullopt.
  std::optional<std::string> refused(const caf::node_id& node) const;
  // A worker passed the handshake: it takes the first vacant active worker whose
  // ranks fit its slots, else it becomes a spare. Returns its record.
  WorkerRecord join(WorkerRecord w);
  // Blocks until every active worker has a process and every expected spare joined,
  // or until `timeout`; returns "" when every active worker has a process (missing
  // spares only warn), else what is missing. `interrupted` is polled.
  std::string wait_until_ready(std::chrono::milliseconds timeout, const std::function<bool()>& interrupted);

  // The worker hosting global rank `index` (Topology::index), or replica d's loader.
  std::optional<WorkerRecord> host_of_rank(int32_t index) const;
  std::optional<WorkerRecord> host_of_loader(int32_t dp) const;

  // The process behind `node` is gone: quarantine it and move what it hosted to
  // spares. Idempotent (the first report's error is kept).
  void lost(const caf::node_id& node, const std::string& error);
  // Set once an active worker has no process and no spare can take it.
  std::optional<std::string> exhausted() const;
  // Called after a shrink or a grow (under the cluster's lock: send messages, do not
  // call back) with the logical rank indices whose hosting worker process changed, so
  // that what lives outside the training group (the checkpoint writers) follows its rank.
  void on_move(std::function<void(const std::vector<int32_t>& moved)> f);

  // Growing back (docs/cluster.md): the most physical replicas, above the current count
  // and at most the placement the run started on, that divide parallel.data and that
  // the live workers hold, when a spare (a worker that joined after a shrink, or one the
  // shrink left over) makes one fit; nullopt otherwise.
  std::optional<int32_t> grow_target() const;
  // Places the logical layout on grow_target() (the training group is between starts:
  // the next start reads placed()); returns it, or nullopt when it no longer fits.
  std::optional<int32_t> grow();

  std::vector<caf::actor> live_agents() const;
  // The host actor of worker `id` while it is alive (active or spare); null otherwise.
  caf::actor live_agent(int32_t worker_id) const;
  // The state mirror's buddies (engine/state_mirror.h): each active worker, in position
  // order, with the next one's id and host (the last's is the first's; none with one).
  struct Buddy {
    caf::actor host;
    MirrorBuddy buddy;
  };
  std::vector<Buddy> mirror_buddies() const;
  std::vector<WorkerRecord> workers() const;
  std::vector<QuarantineRecord> quarantine() const;
  // "worker 2 (host, pid 123)"
  static std::string describe(const WorkerRecord& w);

 private:
  int32_t fits_position(int32_t slots) const;  // a vacant position for `slots`, or -1 (locked)
  // No spare for a vacant position: places the logical layout on the fewest-lost
  // placement the live workers hold and returns its physical replicas, or why none
  // (locked).
  std::variant<int32_t, std::string> shrink_locked();
  // Why the run's placement may not change ("" when it may).
  std::string why_fixed_locked() const;
  // The logical layout on `physical` replicas over the live workers, most slots taking
  // the largest blocks: which worker record stands for which active position.
  struct Fit {
    engine::Topology placed;
    engine::Placement placement;
    std::vector<std::pair<size_t, size_t>> worker_of_position;  // (position, index into workers_)
    std::vector<size_t> live;                                    // the live workers' indices
  };
  std::optional<Fit> fit_locked(int32_t physical) const;
  // The fit of grow_target(), or nullopt.
  std::optional<Fit> grow_fit_locked() const;
  // Takes `f`: the workers it names become the active ones, the other live ones spares;
  // tells on_move which ranks changed process. Returns the new placement in words.
  std::string apply_locked(const Fit& f);

  mutable std::mutex mu_;
  std::condition_variable cv_;
  const Config config_;
  engine::Topology topo_;  // the logical layout on the current placement
  engine::Placement placement_;
  int32_t expected_spares_ = 0;
  std::vector<WorkerRecord> workers_;
  std::vector<int32_t> position_worker_;  // position -> index into workers_, -1 vacant
  std::vector<QuarantineRecord> quarantine_;
  std::optional<std::string> exhausted_;
  std::function<void(const std::vector<int32_t>&)> on_move_;
  int32_t configured_physical_ = 0;  // the placement the run started on: a grow goes back toward it
  const std::chrono::steady_clock::time_point created_ = std::chrono::steady_clock::now();
};

// The communicator generations of the training group across processes: every start
// of the group uses a fresh generation (store prefix RUN_ID/genG); abort() abandons
// the current one everywhere (the store fails its pending rendezvous, every live
// worker aborts its communicators), so no process waits in a collective for a peer
// that is gone. On GPUs, opening a generation also hands out its NCCL group IDs
// through the store (engine/cluster_device_groups.h).
class ClusterComms {
 public:
  ClusterComms(std::shared_ptr<Cluster> cluster, caf::actor store, std::string run_id, const Config& c);
  int64_t current();
  void abort(const std::string& why);
  const std::string& run_id() const { return run_id_; }

 private:
  std::mutex mu_;
  std::shared_ptr<Cluster> cluster_;
  caf::actor store_;
  std::string run_id_;
  Config config_;
  int64_t generation_ = 0;
  bool aborted_ = true;  // the first current() opens generation 1
};

// The store prefix of a generation, the same in every process.
std::string generation_prefix(const std::string& run_id, int64_t generation);

// Places an actor on the worker that hosts it (a blocking request to the worker's
// host actor, from a supervisor that runs on its own thread). When that fails (no
// worker, no answer in `timeout`), returns a stand-in actor that exits at once with
// the reason, so the supervisor sees an ordinary failure.
caf::actor place_on_worker(caf::event_based_actor* self, Cluster& cluster, PlaceActor request,
                           std::chrono::milliseconds timeout = std::chrono::seconds(30));

}  // namespace troupe::actors
